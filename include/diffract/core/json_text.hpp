// JSON text for outputs. Paths and names come from the file system, where any bytes are allowed:
// a string that is not valid UTF-8 has each invalid byte replaced by U+FFFD, so that writing JSON
// never fails (nlohmann's default dump throws on such strings).
#pragma once

#include <string>

namespace diffract {

template <class Json>
std::string json_text(const Json& j, int indent = -1) {
    return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// The value as it reads back from json_text (what a journal written with it compares against).
template <class Json>
Json json_round_trip(const Json& j) {
    return Json::parse(json_text(j));
}

}  // namespace diffract
