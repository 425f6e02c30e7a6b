#include "diffract/edit/edit_jobs.hpp"

#include "diffract/core/error.hpp"

namespace diffract::edit {
namespace {

// A job run without its inputs is the caller's defect, not bad input.
void require_inputs(std::initializer_list<const formats::Checkpoint*> inputs, const char* edit) {
    for (const auto* ck : inputs)
        if (!ck) throw std::logic_error(std::string("edit ") + edit + ": a model was not opened");
}

}  // namespace

// The checks that need no input; what needs the models (weights per model, a LoRA rank against the
// matrices, --per-head with --as-lora) is checked by the edit itself before anything is written.
void TruncateJob::check() const { truncate_rule(keep, rank, energy); }

void InterpolateJob::check() const {
    if (omega.has_value() == !grid.empty())
        throw InputError("edit interpolate: give exactly one of --omega and --grid");
}

EditOutcome run_job(const TruncateJob& job) {
    job.check();
    require_inputs({job.base, job.model}, "truncate");
    if (job.as_lora)
        return {std::nullopt, {}, truncate_as_lora(job.out, *job.base, *job.model, job.rank, job.common)};
    return {
        truncate(job.out, *job.base, *job.model, truncate_rule(job.keep, job.rank, job.energy), job.common)};
}

EditOutcome run_job(const TransplantJob& job) {
    require_inputs({job.base, job.model}, "transplant");
    return {transplant(job.out, *job.base, *job.model, job.common)};
}

EditOutcome run_job(const PermuteJob& job) {
    require_inputs({job.model}, "permute");
    return {permute(job.out, *job.model, job.seed, job.common)};
}

EditOutcome run_job(const InterpolateJob& job) {
    job.check();
    require_inputs({job.a, job.b}, "interpolate");
    if (job.grid.empty()) return {interpolate(job.out, *job.a, *job.b, *job.omega, job.common)};
    return {std::nullopt,
            interpolate_grid(job.out, *job.a, *job.b, job.grid, job.max_candidates, job.common)};
}

EditOutcome run_job(const MergeJob& job) {
    require_inputs({job.base}, "merge");
    return {merge(job.out, *job.base, job.models, job.options, job.common)};
}

EditOutcome run_job(const MergeLoraJob& job) {
    return {merge_lora_adapter(job.out, job.base, job.adapter, job.common)};
}

}  // namespace diffract::edit
