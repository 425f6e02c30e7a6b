// The training step (or token count) a checkpoint's name carries: "step1000", "checkpoint-500",
// "global_step300", "stage1-step2000-tokens4B", "olmo-4T". One rule for every reader of names: the
// report's training series and `watch`'s checkpoints of a run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace diffract {

struct StepKey {
    double value = 0;
    std::string unit;  // "step" or "tokens"
    // A step exactly as its digits say, when it fits in 64 bits: `value` is a double, which above 2^53
    // rounds neighbouring steps to one number.
    std::optional<std::int64_t> exact = std::nullopt;
};

// The step (preferred) or token count named in a checkpoint name; token suffixes K, M, B, T scale by
// 1e3 .. 1e12. Empty when the name carries neither.
std::optional<StepKey> parse_step(std::string_view name);

}  // namespace diffract
