#include "diffract/formats/shard_index.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"

namespace diffract::formats {

ShardIndex parse_shard_index(std::span<const std::byte> bytes, const std::string& label) {
    using nlohmann::json;
    json j;
    const auto* text = reinterpret_cast<const char*>(bytes.data());
    try {
        j = parse_json_bounded(std::string_view(text, bytes.size()), label, true);
    } catch (const json::exception& e) {
        throw_input_error(label, "", fmt::format("index is not valid JSON ({})", e.what()));
    }
    if (!j.is_object()) throw_input_error(label, "", "index is not a JSON object");
    const auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) throw_input_error(label, "", "index has no 'weight_map' object");
    ShardIndex idx;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
        if (!it->is_string())
            throw_input_error(label, it.key(), "weight_map value is not a file name string");
        auto file = it->get<std::string>();
        if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
            file == "." || file == "..")
            throw_input_error(label, it.key(),
                              fmt::format("weight_map names '{}', not a file in the model directory", file));
        idx.weight_map[it.key()] = std::move(file);
    }
    if (idx.weight_map.empty()) throw_input_error(label, "", "weight_map is empty");
    return idx;
}

}  // namespace diffract::formats
