// libFuzzer target: the restricted unpickler over data.pkl bytes. The
// body is shared with the corpus replay unit test (targets_impl.hpp); anything but InputError escaping it is
// a finding.
#include <cstddef>
#include <cstdint>

#include "targets_impl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    diffract::fuzz::pickle({reinterpret_cast<const std::byte*>(data), size});
    return 0;
}
