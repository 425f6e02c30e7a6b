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
#include "job_impl.hpp"

namespace diffract::run {

Job::Job(std::string label, const RunOptions& run, const formats::Checkpoint* base,
         const std::vector<const formats::Checkpoint*>& models)
    : label_(std::move(label)), run_(run), base_(base), models_(models) {
    check_launch();
    detail::check_inputs_and_output(run, base, models, is_root());
    if (!is_root()) return;
    store_.emplace(run.resolved_store());
    // Nor over or inside any input an earlier run recorded in this store.
    if (!run.out.empty()) check_output_path(run.out, recorded_inputs(*store_));
}

bool Job::is_root() const { return distributed().is_root(); }

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

}  // namespace diffract::run
