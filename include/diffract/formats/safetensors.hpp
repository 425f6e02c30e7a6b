// safetensors: the Hugging Face tensor file format.
//
// Byte layout:
//   u64 little-endian N            length of the JSON header
//   N bytes of UTF-8 JSON          {"name": {"dtype": "BF16", "shape": [r, c],
//                                    "data_offsets": [begin, end]}, ...,
//                                    "__metadata__": {"key": "value"}}
//   data section                   tensor bytes; offsets are relative to its start
//
// Every rule the reference implementation enforces is checked before a byte is used: header length
// bounded (<= 100 MB and inside the file), the header is a JSON object, known dtype, non-negative
// shape, end - begin == numel * itemsize (overflow-checked), offsets inside the data section,
// tensors contiguous with no overlap or hole and ending exactly at the end of the file, no
// duplicate names, `__metadata__` maps strings to strings.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "diffract/core/tensor.hpp"

namespace diffract::formats {

inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsEntry {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;  // relative to the data section
    std::uint64_t end = 0;
};

struct SafetensorsHeader {
    std::uint64_t header_size = 0;          // N
    std::vector<SafetensorsEntry> tensors;  // in data order
    std::map<std::string, std::string> metadata;
    std::uint64_t data_start() const { return 8 + header_size; }
};

// Parses and validates the header of a complete safetensors file held in `file`. `label` (the path)
// prefixes every error. Throws InputError.
SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& label);

struct SafetensorsFile {
    std::shared_ptr<const MappedFile> file;
    std::vector<TensorInfo> tensors;
    std::map<std::string, std::string> metadata;
};

// Maps a safetensors file read-only and returns views of its tensors.
SafetensorsFile open_safetensors(const std::string& path);

}  // namespace diffract::formats
