// The first stage of `run::compare`: the plan. The base's selected matrices grouped by tensor, each
// aligned with its counterpart in every model (formats::align, the rule the edit driver uses too), the
// mismatches refused or skipped (--allow-partial), and the flat slot index of (tensor, model, unit)
// under which the Job stores, looks up and returns results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/compare.hpp"
#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/run/compare.hpp"
#include "diffract/run/job.hpp"

namespace diffract::run {

using analysis::TensorJob;

// What the later stages need, and nothing of the options beyond it: the keys, the tasks, the
// computation, the rows and the head ranking read the plan alone.
struct ComparePlan {
    const formats::Checkpoint* base = nullptr;
    // The models, then the reference (ranked against, never ranked): ref_index, or -1 without one.
    std::vector<const formats::Checkpoint*> models;
    int ref_index = -1;
    std::vector<TensorJob> jobs;

    analysis::CompareSettings settings;  // how a unit is computed (precision, route, delta_only, ...)
    std::string config_key;              // the store's configuration string of `settings`
    std::uint64_t budget = 0;            // the run's memory budget, bytes
    // The per-head ranking, when asked for and the base's heads are known.
    std::optional<analysis::HeadRankOptions> ranking;

    struct Where {
        std::size_t job, model, unit;
    };
    std::size_t slots() const { return first_slot_.back(); }
    std::size_t slot(std::size_t job, std::size_t model, std::size_t unit) const;
    Where where(std::size_t slot) const;
    // The slots of one tensor job: [first, last).
    std::size_t first_slot(std::size_t job) const { return first_slot_[job]; }
    std::size_t end_slot(std::size_t job) const { return first_slot_[job + 1]; }
    // Whether a slot is compared: its model holds the tensor and, for a head block, the heads.
    bool compared(std::size_t slot) const;
    // What a compared slot is computed from (the Job keys it by that); an empty source for another.
    SlotSource source(std::size_t slot) const;

    void index_slots();  // after `jobs` is final

private:
    std::vector<std::size_t> first_slot_{0}, slot_job_;
};

// Checks the options that need no input, lists the models, plans the base's matrices and aligns every
// model with them. A mismatch throws InputError, or with allow_partial is added to `skipped`.
ComparePlan plan_compare(const CompareOptions& o, std::vector<SkippedItem>& skipped);

}  // namespace diffract::run
