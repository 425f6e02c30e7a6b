// run::Job's inputs: one name per checkpoint and no output over an input; each tensor's content identity,
// rank 0's sent to every rank; and every rank's check that it reads the bytes rank 0 identified.
#include <set>
#include <string>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/mapped_file.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/distributed.hpp"
#include "diffract/run/job.hpp"
#include "job_impl.hpp"

namespace diffract::run {

namespace detail {

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

}  // namespace detail

void Job::identify(const formats::Checkpoint& ck, const std::vector<const TensorInfo*>& tensors) {
    detail::fault_stop_in_identify();
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

}  // namespace diffract::run
