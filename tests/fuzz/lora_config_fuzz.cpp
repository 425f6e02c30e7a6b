// libFuzzer target: adapter_config.json of a PEFT LoRA adapter. The body is shared with the corpus replay
// unit test (targets_impl.hpp); anything but InputError escaping it is a finding.
#include <cstddef>
#include <cstdint>

#include "targets_impl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    diffract::fuzz::lora_config({reinterpret_cast<const std::byte*>(data), size});
    return 0;
}
