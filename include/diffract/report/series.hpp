// Training series: checkpoints of one run ordered by the step or token count in their names
// (core/step_name.hpp), or in the given order.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/core/step_name.hpp"

namespace diffract::report {

struct Series {
    std::vector<std::string> models;  // in training order
    std::vector<double> x;            // step, token count, or position in the input
    std::string axis_label;
    bool from_names = false;  // true when every name carried a step (of one unit)
};

// Orders `models` by their parsed step when every name has one of the same unit, else keeps them.
Series order_series(const std::vector<std::string>& models);

}  // namespace diffract::report
