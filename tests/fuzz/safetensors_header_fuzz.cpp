// Fuzz target: the safetensors header parser on arbitrary bytes. Only InputError may escape the
// parser; after a successful parse every tensor must lie inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "diffract/core/error.hpp"
#include "diffract/formats/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    try {
        const auto h = diffract::formats::parse_safetensors(bytes, "fuzz");
        for (const auto& t : h.tensors)
            if (h.data_start() + t.end > size) std::abort();
    } catch (const diffract::InputError&) {
    }
    return 0;
}
