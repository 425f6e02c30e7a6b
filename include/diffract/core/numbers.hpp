// The quiet NaN every layer writes for "no value" (a field not computed, a fit without points), and its
// JSON spelling: a finite number as itself, anything else as null.
#pragma once

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace diffract {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline nlohmann::json number_json(double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

}  // namespace diffract
