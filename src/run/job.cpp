#include "diffract/run/job.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "diffract/core/mapped_file.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/distributed.hpp"
#include "diffract/run/stored_results.hpp"
#include "field_values_io_impl.hpp"

namespace diffract::run {

Job::Job(std::string label, const RunOptions& run, const std::vector<const formats::Checkpoint*>& inputs)
    : label_(std::move(label)), run_(run) {
    if (!is_root()) return;
    check_run_output(run, inputs);
    store_.emplace(run.resolved_store());
    // Nor over or inside any input an earlier run recorded in this store.
    if (!run.out.empty()) check_output_path(run.out, recorded_inputs(*store_));
}

bool Job::is_root() const { return distributed().is_root(); }

ContentIds Job::identify(const formats::Checkpoint& ck, const std::vector<const TensorInfo*>& tensors) {
    if (!store_) return {};
    auto ids = identify_model(*store_, ck, tensors, run_.resolved_threads(), run_.progress);
    for (const auto& [t, id] : ids) ids_[t] = id;
    return ids;
}

void Job::look_up(const std::vector<char>& active, std::function<store::ResultKey(std::size_t)> key,
                  const std::vector<std::string>& stored_fields, std::vector<std::string> vector_fields) {
    look_up(
        active, std::move(key), [&](std::size_t) -> const std::vector<std::string>& { return stored_fields; },
        std::move(vector_fields));
}

void Job::look_up(const std::vector<char>& active, std::function<store::ResultKey(std::size_t)> key,
                  const StoredFields& stored_fields, std::vector<std::string> vector_fields) {
    key_ = std::move(key);
    vector_fields_ = std::move(vector_fields);
    state_.assign(active.size(), kInactive);
    values_.assign(active.size(), std::nullopt);
    for (std::size_t i = 0; i < active.size(); ++i) {
        if (!active[i]) continue;
        state_[i] = kPending;
        if (!store_) continue;
        if (auto hit = store_->get(key_(i), stored_fields(i))) {
            values_[i] = std::move(*hit);
            state_[i] = kReused;
            ++reused_;
        }
    }
    broadcast_bytes(state_);
}

void Job::store_result(std::size_t slot, FieldValues values) {
    if (store_) store_->put(key_(slot), values, vector_fields_);
    std::lock_guard lock(mu_);
    values_[slot] = std::move(values);
    ++computed_;
}

void Job::run(const std::vector<Task>& tasks, const Compute& compute) {
    std::vector<TaskCost> costs;
    std::vector<char> needed;
    for (const auto& t : tasks) {
        costs.push_back(t.cost);
        bool any = false;
        for (auto s : t.slots) any |= pending(s);
        needed.push_back(any);
    }
    const auto mine = assign_tasks(costs, needed);
    std::vector<TaskCost> my_costs;
    std::size_t my_steps = 0;
    for (auto t : mine) my_costs.push_back(costs[t]), my_steps += tasks[t].progress_steps;

    // One BLAS thread per worker: parallelism comes from tasks in flight, and results do not depend
    // on the thread or rank count (a threaded BLAS may sum in a different order).
    linalg::set_blas_threads(1);
    Progress progress(label_, my_steps, run_.progress && is_root(), run_.progress_sink);
    double my_cost = 0;
    for (const auto& c : my_costs) my_cost += c.cost;
    progress.weigh(my_cost);
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
        compute(tasks[mine[t]], done, advance);
        check_mapped_inputs_intact();
        for (const auto* read : tasks[mine[t]].reads)
            if (const auto id = ids_.find(read); id != ids_.end()) check_unchanged(*read, id->second);
        for (auto& [slot, v] : computed) store_result(slot, std::move(v));
        progress.advance(steps - advanced, my_costs[t].cost);
    });
    progress.finish();

    // Rank 0 gathers the other ranks' results into the store.
    std::string payload;
    if (!is_root())
        for (auto t : mine)
            for (auto s : tasks[t].slots)
                if (pending(s) && values_[s]) payload += serialize_field_values(s, *values_[s]);
    for (const auto& bytes : gather_bytes(payload))
        for (auto& [slot, v] : parse_field_values(bytes)) {
            if (slot >= state_.size() || !pending(slot))
                throw std::runtime_error(
                    fmt::format("{}: a rank sent result {} that nobody computed", label_, slot));
            store_result(slot, std::move(v));
        }
}

}  // namespace diffract::run
