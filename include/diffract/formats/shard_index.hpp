// model.safetensors.index.json: {"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}.
// Validated: a JSON object whose weight_map maps names to plain file names in the same directory
// (no path separators, no "..").
#pragma once

#include <map>
#include <span>
#include <string>

namespace diffract::formats {

struct ShardIndex {
    std::map<std::string, std::string> weight_map;  // tensor -> shard file name
};

// Parses index JSON bytes; `label` (the path) prefixes errors. Throws InputError.
ShardIndex parse_shard_index(std::span<const std::byte> bytes, const std::string& label);

}  // namespace diffract::formats
