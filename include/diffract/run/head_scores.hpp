// Rewind's unit scores: a compare job over the attention projections (heads) or the experts' matrices.
#pragma once

#include <vector>

#include "diffract/analysis/expert_ranking.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/options.hpp"

namespace diffract::run {

// The per-head scores of `tuned` against `base` (and `reference`, when given): the compare job over the
// attention projections of the layers/names `run.selection` admits (its roles are ignored: the ranking
// always uses Q, K, V and O). Throws InputError when `tuned` has no heads to rank.
std::vector<analysis::HeadRow> head_scores(const formats::Checkpoint& base, const formats::Checkpoint& tuned,
                                           const formats::Checkpoint* reference, RunOptions run);

// The per-expert scores of `tuned` (routed and shared experts, compare's experts.csv rows): the compare
// job over the experts' gate/up/down matrices and the routers of the layers/experts/names
// `run.selection` admits (its roles are ignored). Throws InputError when `tuned` has no experts.
std::vector<analysis::ExpertRow> expert_scores(const formats::Checkpoint& base,
                                               const formats::Checkpoint& tuned,
                                               const formats::Checkpoint* reference, RunOptions run);

}  // namespace diffract::run
