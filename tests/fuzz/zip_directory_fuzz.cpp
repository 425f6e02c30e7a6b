// libFuzzer target: the zip central directory, then the same bytes as a torch.save archive. The
// body is shared with the corpus replay unit test (targets_impl.hpp); anything but InputError escaping it is
// a finding.
#include <cstddef>
#include <cstdint>

#include "targets_impl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    diffract::fuzz::zip_directory({reinterpret_cast<const std::byte*>(data), size});
    return 0;
}
