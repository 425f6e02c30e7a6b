// The catalog's fields of one planned unit (matrix_plan.hpp): its entries read at the run's precision,
// counted for NaN/Inf, and, when clean, handed to the kernels (compute_fields).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/matrix_plan.hpp"

namespace diffract::analysis {

// `singular_values`: the unit's values when computed in advance (a tensor's blocks as one batch);
// `nonfinite`: its count of NaN/Inf entries when counted already, else they are counted here in the
// entries read. A unit with any is never factorised: its fields are NaN (nonfinite_field_values).
// A clean unit carries a nonfinite_count of 0. `on_draw`: MatrixInput::on_draw.
template <typename T>
FieldValues compute_unit_fields(const MatrixUnit& unit, std::optional<linalg::Spectrum> singular_values,
                                std::optional<std::int64_t> nonfinite, const std::vector<std::string>& fields,
                                const KernelConfig& kernel, linalg::Backend& backend,
                                std::function<void()> on_draw = {});

}  // namespace diffract::analysis
