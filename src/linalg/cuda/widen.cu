#include "widen_impl.hpp"

namespace diffract::linalg::cuda {
namespace {

__global__ void widen_kernel(const float* in, double* out, std::size_t n) {
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = static_cast<double>(in[i]);
}

}  // namespace

void widen_to_f64(const float* in, double* out, std::size_t n, cudaStream_t stream) {
    const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    if (blocks) widen_kernel<<<blocks, 256, 0, stream>>>(in, out, n);
}

}  // namespace diffract::linalg::cuda
