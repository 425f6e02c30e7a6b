// libFuzzer target for the GGUF parser: header, metadata key/values and tensor infos.
// Only InputError may escape parse_gguf_bytes; anything else (crash, sanitizer report, another
// exception type) is a finding. After a successful parse the invariants the reader promises are
// checked: every tensor lies inside the input, the metadata dumps as JSON, Q8_0 data dequantises.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "diffract/core/error.hpp"
#include "diffract/formats/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    try {
        const auto f = diffract::formats::parse_gguf_bytes(bytes, "fuzz.gguf");
        (void)f.metadata.dump();
        volatile unsigned sink = 0;
        for (const auto& t : f.tensors) {
            if (t.offset > size || t.nbytes > size - t.offset) std::abort();
            if (t.nbytes > 0) sink = sink + static_cast<unsigned>(bytes[t.offset + t.nbytes - 1]);
            if (t.dtype == diffract::DType::Q8_0) {
                const auto n = static_cast<std::size_t>(t.numel());
                if (n / 32 * 34 != t.nbytes) std::abort();
                if (n <= 4096) {
                    std::vector<float> out(n);
                    diffract::formats::dequantize_q8_0(bytes.data() + t.offset, n, out.data());
                }
            }
        }
    } catch (const diffract::InputError&) {
    }
    return 0;
}
