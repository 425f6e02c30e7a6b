// What the rewind sweeps (rewind, rewind-each, validate) share: their units (heads or experts) behind one
// interface — the scores, the matched random sets, what a set rewinds, its content key (candidates
// rewinding the same units are evaluated once) and its candidate — and the configuration sized for the
// candidates.
//
// Both units travel as the heads' types: a routed expert is a row whose `head` is its index
// (analysis::unit_row) and an edit::RewindHead whose `head` is its index; the edit it is built with is
// the unit's own (edit::rewind or edit::rewind_experts).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "diffract/sweep/sweep.hpp"

namespace diffract::sweep::detail {

// The units' scores of `model` against `base` (and `reference`, may be null): a compare job. Experts:
// the routed experts' rows.
std::vector<analysis::HeadRow> unit_scores(const formats::Checkpoint& base, const formats::Checkpoint& model,
                                           const formats::Checkpoint* reference, const RewindSweep& w);
// A random set matched to `like` (edit::matched_random_heads; experts: edit::matched_random_experts).
std::vector<edit::RewindHead> matched_random_units(const RewindSweep& w,
                                                   const std::vector<analysis::HeadRow>& scores,
                                                   const std::vector<edit::RewindHead>& like,
                                                   std::uint64_t seed);
// What a set rewinds, as curve.csv's and sets.csv's columns (heads: query_heads, kv_blocks, parameters;
// experts: experts, parameters).
std::vector<std::pair<std::string, std::int64_t>> rewound_columns(const RewindSweep& w,
                                                                  const std::vector<edit::RewindHead>& units);
std::string units_content(const RewindSweep& w, std::vector<edit::RewindHead> units);
// A candidate rewinding `units` of w.model to w.base: keyed by its unit set, the model itself (same_as
// "model") when it rewinds nothing, with what it rewinds as curve.csv's columns when `with_amount`.
// The caller names it (order, seed, x, label).
Candidate rewind_candidate(const RewindSweep& w, std::vector<edit::RewindHead> units, bool with_amount);
// "L3_H5" / "L3_E5": the label of a candidate rewinding one unit.
std::string unit_label(const RewindSweep& w, const edit::RewindHead& unit);
// The configuration with the candidates' size known: each is an edited copy of `primary`.
SweepConfig sized(const SweepConfig& config, const formats::Checkpoint& primary);

}  // namespace diffract::sweep::detail
