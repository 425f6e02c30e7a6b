// libFuzzer target: the --heads CSV of edit rewind. The body is shared with the corpus replay unit test
// (targets_impl.hpp); anything but InputError escaping it is a finding.
#include <cstddef>
#include <cstdint>

#include "targets_impl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    diffract::fuzz::heads_csv({reinterpret_cast<const std::byte*>(data), size});
    return 0;
}
