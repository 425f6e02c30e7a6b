// Device kernels, compiled by nvcc (widen.cu) and called from the C++20 host code of the backend.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace diffract::linalg::cuda {

// out[i] = (double) in[i] for n elements, on `stream`.
void widen_to_f64(const float* in, double* out, std::size_t n, cudaStream_t stream);

}  // namespace diffract::linalg::cuda
