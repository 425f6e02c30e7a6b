// One schema per result table: metrics.csv, aggregates.csv (analyze), compare.csv, heads.csv,
// experts.csv, expert_overlap.csv and skipped.csv (compare). Each table's columns are named in tables.cpp
// only, next to the value that fills them; the CSV writers (to_csv), the Python bindings and the report's
// readers all go through these tables, so that none of them spells a column list of its own. An empty cell is
// a missing value (a whole matrix has no head); fit statuses are their names.
#pragma once

#include <string>
#include <vector>

#include "diffract/core/table.hpp"
#include "diffract/run/analyze.hpp"
#include "diffract/run/compare.hpp"

namespace diffract::run {

// The column names readers look up.
namespace column {
inline constexpr char model[] = "model", base[] = "base", tensor[] = "tensor", layer[] = "layer",
                      role[] = "role", head[] = "head", rows[] = "rows", cols[] = "cols",
                      nonfinite_count[] = "nonfinite_count", precision[] = "precision",
                      component[] = "component", expert[] = "expert", expert_kind[] = "expert_kind";
inline constexpr char reference[] = "reference", kv_head[] = "kv_head", kv_group_size[] = "kv_group_size",
                      update_norm[] = "update_norm", ref_update_norm[] = "ref_update_norm",
                      importance[] = "importance", agreement[] = "agreement", pl_ks[] = "pl_ks",
                      scale_scope[] = "scale_scope", order[] = "order", seed[] = "seed", rank[] = "rank";
inline constexpr char block[] = "block", reason[] = "reason";
inline constexpr char expert_a[] = "expert_a", expert_b[] = "expert_b", side[] = "side", overlap_k[] = "k",
                      hidden[] = "hidden", overlap[] = "overlap", overlap_base[] = "overlap_base",
                      overlap_change[] = "overlap_change", chance_p99[] = "chance_p99",
                      above_chance[] = "above_chance", router_angle_degrees[] = "router_angle_degrees";
}  // namespace column

// The columns metrics.csv (with_base: compare.csv) starts with, before its one column per field.
std::vector<std::string> identity_columns(bool with_base);

Table metrics_table(const AnalyzeResult& result);
Table aggregates_table(const AnalyzeResult& result);
Table compare_table(const CompareResult& result);
Table heads_table(const CompareResult& result);
Table experts_table(const CompareResult& result);
Table expert_overlap_table(const CompareResult& result);
Table skipped_table(const CompareResult& result);

}  // namespace diffract::run
