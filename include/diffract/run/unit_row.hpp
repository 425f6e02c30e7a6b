// One row of a per-unit result table (metrics.csv, compare.csv): which matrix or head block of which
// model, its count of NaN/Inf entries, and its fields.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/model/schema.hpp"

namespace diffract::run {

struct UnitRow {
    std::string model, tensor;
    std::optional<int> layer;
    model::Role role = model::Role::other;  // text only in the tables (role_name)
    std::optional<int> head;
    std::optional<int> expert;  // a routed expert's index (model::TensorRole)
    model::ExpertKind expert_kind = model::ExpertKind::none;
    model::Component component = model::Component::language;
    std::int64_t rows = 0, cols = 0;
    // NaN/Inf entries read at the run's precision (compare: positions where the model's or the base's
    // block holds one); when > 0 the unit was never factorised and every field is NaN.
    std::int64_t nonfinite_count = 0;
    // The precision of the arithmetic its fields were computed in (Bookkeeping::precision_bits): 32 under
    // --precision f32, 64 where that matrix fell back to f64 (and throughout the f64 tier).
    int precision_bits = 64;
    std::map<std::string, double> values;
};

// What a job did for one of its models: units computed, and units whose results were reused.
struct WorkCounts {
    std::size_t computed = 0, reused = 0;
};

// The identity columns of `unit` of the model called `model`.
UnitRow unit_row(const std::string& model, const analysis::MatrixUnit& unit);

}  // namespace diffract::run
