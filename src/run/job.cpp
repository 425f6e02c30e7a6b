#include "diffract/run/job.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/mapped_file.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/distributed.hpp"
#include "diffract/run/shipped_inputs.hpp"
#include "diffract/run/stored_results.hpp"
#include "field_values_io_impl.hpp"

namespace diffract::run {
namespace {

// Fault injection for the tests of a worker killed late (DIFFRACT_TEST_KILL_AFTER_RESULTS=N): after
// sending N of its `share` tasks' results (N < 0: all but -N of them) this rank waits a second (so
// that they reach rank 0) and kills itself.
void fault_after_sent(std::size_t sent, std::size_t share) {
    static const long kill_after = [] {
        const char* v = std::getenv("DIFFRACT_TEST_KILL_AFTER_RESULTS");
        return v ? std::strtol(v, nullptr, 10) : 0L;
    }();
    if (kill_after == 0) return;
    const long at = kill_after > 0 ? kill_after : static_cast<long>(share) + kill_after;
    if (static_cast<long>(sent) < std::max(at, 1L)) return;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::raise(SIGKILL);
}

// Fault injection for the tests of a rank stopped while a job starts (DIFFRACT_TEST_STOP_IN_IDENTIFY set in
// that rank's environment): it stops itself (SIGSTOP) as it identifies its inputs, as a frozen host would.
void fault_stop_in_identify() {
    static const bool stop = std::getenv("DIFFRACT_TEST_STOP_IN_IDENTIFY") != nullptr;
    if (stop) std::raise(SIGSTOP);
}

// One name per checkpoint: every result row and the store's names are keyed by model name. Then, on
// rank 0 (which writes), no output over an input: `run.out` is not, does not contain and does not lie
// inside an input or the store, and the store is not inside an input.
void check_inputs_and_output(const RunOptions& run, const formats::Checkpoint* base,
                             const std::vector<const formats::Checkpoint*>& models, bool root) {
    for (std::size_t i = 0; i < models.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j)
            if (models[j]->name == models[i]->name)
                throw_input_error(
                    models[i]->path, "",
                    fmt::format("the name '{}' is already given to {}: one name per model (name "
                                "them apart with NAME=PATH)",
                                models[i]->name, models[j]->path));
        if (base && base->name == models[i]->name &&
            physical_path(base->path) != physical_path(models[i]->path))
            throw_input_error(models[i]->path, "",
                              fmt::format("the name '{}' is the base's ({}): one name per checkpoint (name "
                                          "them apart with NAME=PATH)",
                                          models[i]->name, base->path));
    }
    if (!root || run.out.empty()) return;
    std::vector<const formats::Checkpoint*> inputs;
    if (base) inputs.push_back(base);
    for (const auto* m : models) inputs.push_back(m);
    const auto inputs_read = formats::input_paths(inputs);
    std::vector<std::string> protected_paths{run.resolved_store()};
    protected_paths.insert(protected_paths.end(), inputs_read.begin(), inputs_read.end());
    check_output_path(run.out, protected_paths);
    check_output_kind(run.out, OutputKind::directory);
    // The store is an output too: never inside (or over) an input.
    check_output_path(run.resolved_store(), inputs_read, "--store");
}

}  // namespace

Job::Job(std::string label, const RunOptions& run, const formats::Checkpoint* base,
         const std::vector<const formats::Checkpoint*>& models)
    : label_(std::move(label)), run_(run), base_(base), models_(models) {
    check_launch();
    check_inputs_and_output(run, base, models, is_root());
    if (!is_root()) return;
    store_.emplace(run.resolved_store());
    // Nor over or inside any input an earlier run recorded in this store.
    if (!run.out.empty()) check_output_path(run.out, recorded_inputs(*store_));
}

bool Job::is_root() const { return distributed().is_root(); }

void Job::identify(const formats::Checkpoint& ck, const std::vector<const TensorInfo*>& tensors) {
    fault_stop_in_identify();
    ContentIds ids;
    if (store_) ids = identify_model(*store_, ck, tensors, run_.resolved_threads(), run_.progress);
    for (const auto& [t, id] : ids) ids_[t] = id;
    if (distributed().size == 1) return;
    // Every rank learns rank 0's ids of the same tensors: what its own copy of the inputs must hash to
    // before it computes anything (verify_inputs).
    std::string bytes = is_root() ? encode_ids(tensors, ids) : std::string();
    broadcast_bytes(bytes);
    if (!is_root()) take_root_ids(ck, tensors, bytes);
}

// Every tensor the job's slots read, each once in slot order, identified input by input: the base, then
// every model, even one with nothing to identify (each is a broadcast the ranks take in step).
void Job::identify_sources(const std::vector<SlotSource>& sources) {
    std::vector<const TensorInfo*> of_base;
    std::vector<std::vector<const TensorInfo*>> of_model(models_.size());
    std::set<const TensorInfo*> seen;
    const auto add = [&seen](std::vector<const TensorInfo*>& list, const TensorInfo* t) {
        if (t && seen.insert(t).second) list.push_back(t);
    };
    for (const auto& s : sources) {
        if (!s.tensor) continue;
        add(of_base, s.base_tensor);
        const auto m = std::find(models_.begin(), models_.end(), s.model) - models_.begin();
        add(of_model.at(static_cast<std::size_t>(m)), s.tensor);
    }
    if (base_) identify(*base_, of_base);
    for (std::size_t m = 0; m < models_.size(); ++m) {
        identify(*models_[m], of_model[m]);
        if (base_ && store_) store_->record_pair(models_[m]->name, base_->name);
    }
}

std::string Job::encode_ids(const std::vector<const TensorInfo*>& tensors, const ContentIds& ids) {
    std::string out;
    const auto put = [&out](const std::string& s) {
        const std::uint64_t n = s.size();
        out.append(reinterpret_cast<const char*>(&n), sizeof n);
        out += s;
    };
    for (const auto* t : tensors) {
        put(t->name);
        const auto it = ids.find(t);
        put(it == ids.end() ? std::string() : it->second);
    }
    return out;
}

void Job::take_root_ids(const formats::Checkpoint& ck, const std::vector<const TensorInfo*>& tensors,
                        const std::string& bytes) {
    std::size_t at = 0;
    const auto take = [&](std::string& s) {
        std::uint64_t n = 0;
        if (bytes.size() - at < sizeof n) return false;
        std::memcpy(&n, bytes.data() + at, sizeof n);
        at += sizeof n;
        if (bytes.size() - at < n) return false;
        s.assign(bytes, at, n);
        at += n;
        return true;
    };
    for (const auto* t : tensors) {
        std::string name, id;
        if (!take(name) || !take(id)) {
            note_mismatch(fmt::format(
                "{}: holds tensors rank 0's copy does not (from {}): not the same model", ck.path, t->name));
            return;
        }
        if (name != t->name) {
            note_mismatch(
                fmt::format("{}: tensor {} where rank 0's copy has {}: not the same model, or its "
                            "tensors stored in another order (ranks share work by position)",
                            ck.path, t->name, name));
            return;
        }
        if (!id.empty()) ids_[t] = id;
    }
    if (at != bytes.size())
        note_mismatch(
            fmt::format("{}: rank 0's copy holds more tensors than this one: not the same model", ck.path));
}

void Job::note_mismatch(std::string what) {
    if (mismatch_.empty()) mismatch_ = std::move(what);
}

std::vector<const TensorInfo*> tensors_read(const std::vector<Task>& tasks,
                                            const std::vector<std::size_t>& share) {
    std::vector<const TensorInfo*> out;
    std::set<const TensorInfo*> seen;
    for (auto i : share)
        for (const auto* t : tasks[i].reads)
            if (seen.insert(t).second) out.push_back(t);
    return out;
}

void Job::verify_inputs(const std::vector<Task>& tasks, const std::vector<std::size_t>& mine) {
    if (distributed().size == 1) return;
    if (!is_root() && mismatch_.empty()) {
        for (const auto* read : tensors_read(tasks, mine))
            if (const auto id = ids_.find(read); id != ids_.end() && content_id_now(*read) != id->second) {
                note_mismatch(
                    fmt::format("{}: tensor {}: its bytes differ from rank 0's copy (a stale or "
                                "different file)",
                                read->path(), read->name));
                break;
            }
    }
    agree_on_mismatch();
}

void Job::agree_on_mismatch() {
    if (distributed().size == 1) return;
    // Every rank learns the first rank's mismatch, and all stop before anything is computed or stored.
    std::string verdict =
        mismatch_.empty() ? std::string()
                          : fmt::format("rank {} on host {}: {}", distributed().rank, host_name(), mismatch_);
    std::string first;
    for (const auto& v : gather_bytes(verdict))
        if (first.empty()) first = v;
    broadcast_bytes(first);
    if (first.empty()) return;
    if (!is_root()) throw RankStop();
    throw InputError(first +
                     "; every rank must read the same bytes as rank 0 (docs/distributed.md): "
                     "nothing was computed or stored");
}

void Job::look_up(std::size_t slots, const Source& source, const std::vector<std::string>& stored_fields,
                  std::vector<std::string> vector_fields) {
    look_up(
        slots, source, [&](std::size_t) -> const std::vector<std::string>& { return stored_fields; },
        std::move(vector_fields));
}

void Job::look_up(std::size_t slots, const Source& source, const StoredFields& stored_fields,
                  std::vector<std::string> vector_fields) {
    std::vector<SlotSource> sources;
    sources.reserve(slots);
    for (std::size_t i = 0; i < slots; ++i) sources.push_back(source(i));
    identify_sources(sources);
    vector_fields_ = std::move(vector_fields);
    state_.assign(slots, kInactive);
    values_.assign(slots, std::nullopt);
    keys_.assign(store_ ? slots : 0, {});
    for (std::size_t i = 0; i < slots; ++i) {
        const auto& s = sources[i];
        if (!s.tensor) continue;
        state_[i] = kPending;
        if (!store_) continue;
        keys_[i] = {ids_.at(s.tensor), s.base_tensor ? ids_.at(s.base_tensor) : std::string(), s.block,
                    s.config};
        if (auto hit = store_->get(keys_[i], stored_fields(i))) {
            values_[i] = std::move(*hit);
            state_[i] = kReused;
            ++reused_;
        }
    }
    // A store on a read-only file system serves what it holds; a result it lacks could not be kept.
    if (store_ && store_->read_only_medium())
        if (const auto missing = std::count(state_.begin(), state_.end(), kPending); missing > 0)
            throw_input_error(
                store_->path(), "",
                fmt::format("the results store is on a read-only file system and lacks {} of this "
                            "{}'s {} results, which could not be kept (give --store on a writable "
                            "file system)",
                            missing, label_,
                            state_.size() - std::count(state_.begin(), state_.end(), kInactive)));
    broadcast_bytes(state_);
}

linalg::Backend& Job::thread_backend() {
    const std::lock_guard lock(backends_mu_);
    auto& backend = backends_[std::this_thread::get_id()];
    if (!backend) backend = linalg::make_backend(run_.device);
    return *backend;
}

void Job::store_result(std::size_t slot, FieldValues values) {
    if (store_) store_->put(keys_[slot], values, vector_fields_);
    std::lock_guard lock(mu_);
    values_[slot] = std::move(values);
    ++computed_;
}

void Job::run(const std::vector<Task>& tasks, const Compute& compute) {
    // A worker whose inputs are another model plans other slots: agree on that before using rank 0's.
    if (!is_root() && state_.size() != values_.size())
        note_mismatch("its inputs plan other matrices than rank 0's: not the same model");
    agree_on_mismatch();
    std::vector<TaskCost> costs;
    std::vector<char> needed;
    for (const auto& t : tasks) {
        costs.push_back(t.cost);
        bool any = false;
        for (auto s : t.slots) any |= pending(s);
        needed.push_back(any);
    }
    const auto shares = assign_tasks(costs, needed);
    const auto& mine = shares[static_cast<std::size_t>(distributed().rank)];
    if (run_.ship_inputs) ship_inputs(tasks, shares);
    verify_inputs(tasks, mine);
    std::vector<TaskCost> my_costs;
    std::size_t my_steps = 0, all_steps = 0;
    double my_cost = 0, all_cost = 0;
    for (auto t : mine)
        my_costs.push_back(costs[t]), my_steps += tasks[t].progress_steps, my_cost += costs[t].cost;
    for (std::size_t t = 0; t < tasks.size(); ++t)
        if (needed[t]) all_steps += tasks[t].progress_steps, all_cost += costs[t].cost;

    // One BLAS thread per worker: parallelism comes from tasks in flight, and results do not depend
    // on the thread or rank count (a threaded BLAS may sum in a different order). Rank 0's progress
    // line covers every rank: the others' tasks advance it as their results arrive.
    linalg::set_blas_threads(1);
    Progress progress(label_, is_root() ? all_steps : my_steps, run_.progress && is_root(),
                      run_.progress_sink);
    progress.weigh(is_root() ? all_cost : my_cost);
    Outbox outbox;
    const auto compute_share = [&] {
        run_tasks(my_costs, run_.resolved_threads(), run_.resolved_max_memory(), [&](std::size_t t) {
            const std::size_t steps = tasks[mine[t]].progress_steps;
            // Results wait for the check of what they were computed from.
            std::vector<std::pair<std::size_t, FieldValues>> computed;
            const Done done = [&computed](std::size_t slot, FieldValues v) {
                computed.emplace_back(slot, std::move(v));
            };
            std::size_t advanced = 0;
            const Advance advance = [&](std::size_t n) {
                n = std::min(n, steps - advanced);
                advanced += n;
                progress.advance(n);
            };
            compute(tasks[mine[t]], done, advance, thread_backend());
            check_mapped_inputs_intact();
            for (const auto* read : tasks[mine[t]].reads)
                if (const auto id = ids_.find(read); id != ids_.end()) check_unchanged(*read, id->second);
            if (!is_root()) outbox.put(encode_task_results(mine[t], computed));
            for (auto& [slot, v] : computed) store_result(slot, std::move(v));
            progress.advance(steps - advanced, my_costs[t].cost);
        });
    };
    if (distributed().size == 1) {
        compute_share();
    } else {
        exchange(tasks, costs, compute_share, mine.size(), outbox, progress);
    }
    progress.finish();
}

void Job::ship_inputs(const std::vector<Task>& tasks, const std::vector<std::vector<std::size_t>>& shares) {
    const auto start = std::chrono::steady_clock::now();
    const auto sent = ship_task_inputs(tasks, shares);
    if (!is_root() || distributed().size == 1 || !run_.progress) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // What shipping costs, against the computing that follows: the line a user weighs --ship-inputs by.
    fmt::print(stderr, "{}: sent {:.1f} MiB of inputs to {} ranks in {:.2f} s ({:.0f} MiB/s)\n", label_,
               static_cast<double>(sent) / (1 << 20), distributed().size - 1, seconds,
               static_cast<double>(sent) / (1 << 20) / std::max(seconds, 1e-9));
}

std::string Job::encode_task_results(std::size_t task,
                                     const std::vector<std::pair<std::size_t, FieldValues>>& computed) {
    std::string out(sizeof(std::uint64_t), '\0');
    const std::uint64_t index = task;
    std::memcpy(out.data(), &index, sizeof index);
    for (const auto& [slot, v] : computed) out += serialize_field_values(slot, v);
    return out;
}

void Job::receive_task_results(const std::string& bytes, const std::vector<Task>& tasks,
                               const std::vector<TaskCost>& costs, Progress& progress) {
    std::uint64_t task = 0;
    if (bytes.size() < sizeof task) throw std::runtime_error(label_ + ": a rank sent a malformed result");
    std::memcpy(&task, bytes.data(), sizeof task);
    if (task >= tasks.size()) throw std::runtime_error(label_ + ": a rank sent the result of no task");
    for (auto& [slot, v] : parse_field_values(bytes.substr(sizeof task))) {
        if (!pending(slot))
            throw std::runtime_error(
                fmt::format("{}: a rank sent result {} that nobody computed", label_, slot));
        store_result(slot, std::move(v));
    }
    progress.advance(tasks[task].progress_steps, costs[task].cost);
}

void Job::exchange(const std::vector<Task>& tasks, const std::vector<TaskCost>& costs,
                   const std::function<void()>& compute_share, std::size_t share_size, Outbox& outbox,
                   Progress& progress) {
    // The share is computed on a thread of its own: this (the main) thread is the one that talks MPI.
    std::exception_ptr error;
    std::atomic<bool> finished{false};
    std::thread share([&] {
        try {
            compute_share();
        } catch (...) {
            error = std::current_exception();
        }
        finished = true;
    });
    const auto stop_share = [&] {
        if (!finished) request_cancel();  // the tasks in flight finish; no new one starts
        // A share blocked on its inputs never finishes: the job ends without it (the process exits and the
        // other ranks are aborted right after this error is reported).
        if (!finished && this_rank_blocked()) return share.detach();
        share.join();
    };
    try {
        if (is_root()) {
            const auto n = static_cast<std::size_t>(distributed().size);
            std::vector<char> done(n, 0);
            done[0] = 1;
            for (;;) {
                bool heard = false;
                while (auto m = poll_message()) {
                    heard = true;
                    if (m->tag == kTagResults) receive_task_results(m->bytes, tasks, costs, progress);
                    if (m->tag == kTagDone) done[static_cast<std::size_t>(m->source)] = 1;
                }
                if (finished && (error || std::all_of(done.begin(), done.end(), [](char d) { return d; })))
                    break;
                check_ranks_alive(done);  // the ranks not done yet
                if (!heard) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        } else {
            std::size_t sent = 0;
            for (;;) {
                const bool was_finished = finished;
                for (auto& payload : outbox.take()) {
                    send_bytes(0, kTagResults, payload);
                    fault_after_sent(++sent, share_size);
                }
                if (was_finished) break;
                check_ranks_alive();  // rank 0, and this rank's own computing threads
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
            if (!error) send_bytes(0, kTagDone, std::string());
        }
    } catch (...) {
        stop_share();
        throw;
    }
    share.join();
    if (error) std::rethrow_exception(error);
}

}  // namespace diffract::run
