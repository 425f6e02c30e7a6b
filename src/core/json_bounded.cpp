#include "diffract/core/json_bounded.hpp"

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract {
namespace {

// Levels a preview shows before writing "..." in place of what is inside.
constexpr int kPreviewDepth = 4;

template <class Json>
void preview_into(const Json& v, std::string& out, std::size_t budget, int depth) {
    if (out.size() > budget) return;
    if (v.is_array() || v.is_object()) {
        out += v.is_array() ? '[' : '{';
        if (!v.empty() && depth >= kPreviewDepth) {
            out += "...";
        } else {
            bool first = true;
            for (auto it = v.begin(); it != v.end() && out.size() <= budget; ++it) {
                if (!first) out += ',';
                first = false;
                if (v.is_object()) {
                    preview_into(Json(it.key().substr(0, budget + 1)), out, budget, depth + 1);
                    out += ':';
                }
                preview_into(*it, out, budget, depth + 1);
            }
        }
        out += v.is_array() ? ']' : '}';
    } else if (v.is_string()) {
        // Only as much of a long string as can be shown is escaped.
        const auto& s = v.template get_ref<const typename Json::string_t&>();
        out += Json(s.substr(0, budget + 1)).dump(-1, ' ', false, Json::error_handler_t::replace);
    } else {
        out += v.dump();  // a number, boolean or null: a few characters
    }
}

template <class Json>
std::string preview(const Json& v, std::size_t max_chars) {
    std::string out;
    preview_into(v, out, max_chars, 0);
    if (out.size() <= max_chars) return out;
    std::size_t cut = max_chars;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // whole characters
    return out.substr(0, cut) + "...";
}

}  // namespace

std::size_t json_depth(std::string_view text, std::size_t stop_after) {
    std::size_t depth = 0;
    std::size_t deepest = 0;
    bool in_string = false;
    bool escaped = false;
    for (const char c : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest && (deepest = depth) > stop_after) break;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

void check_json_depth(std::string_view text, std::string_view label) {
    if (json_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
        throw_input_error(label, "", fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth));
}

std::string json_preview(const nlohmann::json& value, std::size_t max_chars) {
    return preview(value, max_chars);
}

std::string json_preview(const nlohmann::ordered_json& value, std::size_t max_chars) {
    return preview(value, max_chars);
}

}  // namespace diffract
