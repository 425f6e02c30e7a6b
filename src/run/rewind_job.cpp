#include "diffract/run/rewind_job.hpp"

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/run/head_scores.hpp"

namespace diffract::run {

void RewindJob::check() const {
    if (unit == edit::RewindUnit::experts) {
        if (!heads_file.empty() || heads)
            throw InputError(
                "edit rewind: --heads lists heads; with --unit experts name the experts with "
                "--experts (and --layers) or give --fraction");
        if (as_lora) throw InputError("edit rewind: --as-lora rewinds heads only, not --unit experts");
        if (!fraction && common.selection.experts.empty() && !common.selection.shared_experts)
            throw InputError(
                "edit rewind --unit experts: give --fraction, or name the experts with --experts");
        return;
    }
    if (!heads_file.empty() && heads)
        throw InputError("edit rewind: give the heads as a file or as a list, not both");
    edit::check_rewind_heads_choice(fraction.has_value(), !heads_file.empty() || heads.has_value());
    if (heads_file.empty() && heads && heads->empty())
        throw InputError("heads: lists no heads (expected (layer, head) pairs)");
}

namespace {

RewindOutcome rewind_experts(const RewindJob& job) {
    RewindOutcome outcome;
    if (job.fraction) {
        auto run = job.run;
        run.selection = job.common.selection;
        run.out = job.out;
        outcome.experts = edit::lowest_experts(expert_scores(*job.base, *job.model, job.reference, run),
                                               job.ranking, *job.fraction);
    } else {
        outcome.experts = edit::selected_experts(*job.model, job.common.selection);
        if (outcome.experts.empty())
            throw_input_error(
                job.model->path, "",
                fmt::format("the selection (--experts, --layers, ...) names none of the model's "
                            "{} experts: nothing to rewind",
                            edit::selected_experts(*job.model, {}).size()));
    }
    outcome.summary =
        edit::rewind_experts(job.out, *job.base, *job.model, outcome.experts, job.router, job.common);
    return outcome;
}

}  // namespace

RewindOutcome rewind(const RewindJob& job) {
    job.check();
    if (job.unit == edit::RewindUnit::experts) return rewind_experts(job);
    RewindOutcome outcome;
    if (!job.heads_file.empty()) {
        outcome.heads = edit::read_heads_file(job.heads_file);
    } else if (job.heads) {
        outcome.heads = *job.heads;
    } else {
        auto run = job.run;
        run.selection = job.common.selection;
        run.out = job.out;  // refused before the heads are ranked, not after
        outcome.heads = edit::lowest_heads(head_scores(*job.base, *job.model, job.reference, run),
                                           job.ranking, *job.fraction);
    }
    outcome.summary = (job.as_lora ? edit::rewind_adapter : edit::rewind)(
        job.out, *job.base, *job.model, outcome.heads, job.kv, job.common, job.o_bias);
    return outcome;
}

}  // namespace diffract::run
