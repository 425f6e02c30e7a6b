// Fuzz target: model.safetensors.index.json parsing. Only InputError may escape; accepted file
// names never leave the model directory.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "diffract/core/error.hpp"
#include "diffract/formats/shard_index.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    try {
        const auto idx = diffract::formats::parse_shard_index(bytes, "fuzz");
        for (const auto& [tensor, file] : idx.weight_map)
            if (file.find('/') != std::string::npos || file == "..") std::abort();
    } catch (const diffract::InputError&) {
    }
    return 0;
}
