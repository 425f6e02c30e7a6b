// JSON read from files and commands, with bounded depth; JSON quoted in messages, with bounded cost.
// nlohmann's parser nests iteratively and frees a value iteratively, but copying, comparing and dumping
// a value recurse once per level: a value 100,000 levels deep would overflow the stack. Every JSON text
// the program reads goes through parse_json_bounded, and every value quoted in a message through
// json_preview, so neither depth nor size of a value can crash or stall a command.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace diffract {

// Deeper nesting of arrays and objects than any configuration, header or evaluator line holds.
inline constexpr std::size_t kMaxJsonDepth = 256;

// The deepest nesting of arrays and objects in `text` ('[' and '{' outside strings), counted in one
// pass without parsing; the count stops once it exceeds `stop_after`.
std::size_t json_depth(std::string_view text, std::size_t stop_after = kMaxJsonDepth);

// Throws InputError "<label>: JSON nested deeper than 256 levels" when `text` nests deeper than
// kMaxJsonDepth.
void check_json_depth(std::string_view text, std::string_view label);

// nlohmann's parse of `text` once check_json_depth(text, label) passed: with `allow_exceptions` false
// (the default) a text that is not JSON gives a discarded value, as nlohmann's own parse does.
template <class Json = nlohmann::json>
Json parse_json_bounded(std::string_view text, std::string_view label, bool allow_exceptions = false) {
    check_json_depth(text, label);
    return Json::parse(text.begin(), text.end(), nullptr, allow_exceptions);
}

// A short quote of `value` for a message: its JSON text cut to at most `max_chars` characters (then
// "..."), built from at most a few levels and as many elements as fit, never from the whole value.
std::string json_preview(const nlohmann::json& value, std::size_t max_chars = 40);
std::string json_preview(const nlohmann::ordered_json& value, std::size_t max_chars = 40);

}  // namespace diffract
