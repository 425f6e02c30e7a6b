// "Did you mean ...?": the candidate closest to a mistyped word (a command, a path).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace diffract {

// Edit distance with transpositions (optimal string alignment): "anaylze" is one step from "analyze".
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` when it is at most `max_distance` edits away (or starts with a
// `word` of 3 characters or more); "" when none is.
std::string closest_spelling(std::string_view word, const std::vector<std::string>& candidates,
                             std::size_t max_distance = 2);

}  // namespace diffract
