// Training series: checkpoints of one run ordered by the step or token count in their names
// ("step1000", "stage1-step2000-tokens4B", "checkpoint-500", "olmo-4T"), or in the given order.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace diffract::report {

struct StepKey {
    double value = 0;
    std::string unit;  // "step" or "tokens"
};

// The step (preferred) or token count named in a checkpoint name; token suffixes K, M, B, T scale by
// 1e3 .. 1e12. Empty when the name carries neither.
std::optional<StepKey> parse_step(std::string_view name);

struct Series {
    std::vector<std::string> models;  // in training order
    std::vector<double> x;            // step, token count, or position in the input
    std::string axis_label;
    bool from_names = false;  // true when every name carried a step (of one unit)
};

// Orders `models` by their parsed step when every name has one of the same unit, else keeps them.
Series order_series(const std::vector<std::string>& models);

}  // namespace diffract::report
