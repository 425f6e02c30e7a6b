// libFuzzer target: the pairing of quantized weights with their scales by quantization_config, and their
// decoding (formats/quantized_safetensors.hpp, core/quantized.hpp). The body is shared with the corpus
// replay unit test (targets_impl.hpp); anything but InputError escaping it is a finding.
#include <cstddef>
#include <cstdint>

#include "targets_impl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    diffract::fuzz::quantized_pairing({reinterpret_cast<const std::byte*>(data), size});
    return 0;
}
