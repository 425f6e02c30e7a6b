#include "diffract/linalg/blas_info.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "lapack_impl.hpp"

namespace diffract::linalg {

std::string blas_description() {
    std::string d = fmt::format("{}, kernels {}", openblas_get_config(), openblas_get_corename());
    if (const char* pinned = std::getenv("OPENBLAS_CORETYPE"); pinned && *pinned)
        d += fmt::format(" (set by OPENBLAS_CORETYPE={}, not detected from the CPU)", pinned);
    return d;
}

}  // namespace diffract::linalg
