// libFuzzer target: a checkpoint's trainer_state.json (watch). The body is shared with the corpus replay
// unit test (targets_impl.hpp); a negative step or anything escaping it is a finding.
#include <cstddef>
#include <cstdint>

#include "targets_impl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    diffract::fuzz::trainer_state({reinterpret_cast<const std::byte*>(data), size});
    return 0;
}
