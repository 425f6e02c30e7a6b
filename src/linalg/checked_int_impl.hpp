// BLAS and LAPACK, on the host (OpenBLAS) and on the device (cuBLAS, cuSOLVER's legacy API), take
// 32-bit dimensions: a larger one is refused with its name instead of being truncated.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace diffract::linalg {

inline int checked_int(std::int64_t v, const char* what) {
    if (v > std::numeric_limits<int>::max())
        throw std::runtime_error(fmt::format("{} {} exceeds the 32-bit index of BLAS/LAPACK", what, v));
    return static_cast<int>(v);
}

}  // namespace diffract::linalg
