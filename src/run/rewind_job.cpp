#include "diffract/run/rewind_job.hpp"

#include "diffract/core/error.hpp"
#include "diffract/run/head_scores.hpp"

namespace diffract::run {

void RewindJob::check() const {
    if (!heads_file.empty() && heads)
        throw InputError("edit rewind: give the heads as a file or as a list, not both");
    edit::check_rewind_heads_choice(fraction.has_value(), !heads_file.empty() || heads.has_value());
    if (heads_file.empty() && heads && heads->empty())
        throw InputError("heads: lists no heads (expected (layer, head) pairs)");
}

RewindOutcome rewind(const RewindJob& job) {
    job.check();
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
