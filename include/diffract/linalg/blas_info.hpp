// What BLAS the process runs, for --version and the benchmarks' output.
#pragma once

#include <string>

namespace diffract::linalg {

// The BLAS library's build configuration and the kernels it chose when it was loaded. OpenBLAS picks
// its kernels from the CPU unless OPENBLAS_CORETYPE names them; an environment that pins older kernels
// than the CPU has (Haswell's AVX2 on an AVX-512 machine) halves the matrix products
// (docs/performance.md), so such a pin is named.
std::string blas_description();

}  // namespace diffract::linalg
