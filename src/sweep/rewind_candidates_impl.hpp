// What the rewind sweeps (rewind, rewind-each, validate) share: a head set's content key (candidates
// rewinding the same heads are evaluated once), the configuration sized for the candidates, the head
// scores of a compare job.
#pragma once

#include <string>
#include <vector>

#include "diffract/sweep/sweep.hpp"

namespace diffract::sweep::detail {

std::string heads_content(std::vector<edit::RewindHead> heads, edit::KvPolicy kv);
// A candidate rewinding `heads` of w.model to w.base: keyed by its head set, the model itself (same_as
// "model") when it rewinds nothing, with what it rewinds as curve.csv's columns when `amount` is given.
// The caller names it (order, seed, x, label).
Candidate rewind_candidate(const RewindSweep& w, std::vector<edit::RewindHead> heads,
                           const edit::RewoundAmount* amount);
// The configuration with the candidates' size known: each is an edited copy of `primary`.
SweepConfig sized(const SweepConfig& config, const formats::Checkpoint& primary);
// The heads' scores of `model` against `base` (and `reference`, may be null): a compare job.
std::vector<analysis::HeadRow> head_scores(const formats::Checkpoint& base, const formats::Checkpoint& model,
                                           const formats::Checkpoint* reference, const RewindSweep& w);

}  // namespace diffract::sweep::detail
