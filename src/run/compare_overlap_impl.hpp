// compare's expert-redundancy stage (expert_overlap.csv): the pairwise subspace overlaps of each
// layer's routed experts (analysis/expert_overlap.hpp), after the plan's units are computed.
#pragma once

#include <cstdint>
#include <vector>

#include "compare_plan_impl.hpp"
#include "diffract/analysis/expert_overlap.hpp"

namespace diffract::run {

// Per layer of the plan's routed experts (the language model's), each expert's read subspace (its
// selected gate, up or gate_up matrices) and write subspace (its down matrix), top `k`, in the base and
// in every model but the reference; then every pair a < b on each side, with the chance floor of their
// (hidden, k), its 99th percentile seeded by `seed`. One layer's matrices at a time: each is read,
// reduced to its subspace (hidden × k) and dropped, the subspaces computed as tasks on `run`'s threads
// (LAPACK on the CPU, whatever the run's device). An expert a model lacks (--allow-partial) or whose
// matrix has rank under k or NaN/Inf entries has NaN overlaps there. Rows in order of model, layer,
// side and pair.
std::vector<analysis::ExpertOverlapRow> expert_overlaps(const ComparePlan& plan, int k, std::uint64_t seed,
                                                        const RunOptions& run);

}  // namespace diffract::run
