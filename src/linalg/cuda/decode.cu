#include <cuda_fp16.h>

#include <cstdint>

#include "decode_impl.hpp"

namespace diffract::linalg::cuda {
namespace {

__device__ double decode_one(const void* in, Encoding e, std::size_t i, bool round_to_f32) {
    switch (e) {
        case Encoding::bf16:  // the upper half of an f32: exact
            return static_cast<double>(
                __uint_as_float(static_cast<unsigned>(static_cast<const std::uint16_t*>(in)[i]) << 16));
        case Encoding::f16:
            return static_cast<double>(__half2float(static_cast<const __half*>(in)[i]));
        case Encoding::f32:
            return static_cast<double>(static_cast<const float*>(in)[i]);
        case Encoding::f64:
        default: {
            const double v = static_cast<const double*>(in)[i];
            return round_to_f32 ? static_cast<double>(static_cast<float>(v)) : v;
        }
    }
}

__global__ void decode_kernel(const void* in, Encoding e, double* out, std::size_t n, bool round_to_f32) {
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = decode_one(in, e, i, round_to_f32);
}

}  // namespace

void decode_to_f64(const void* in, Encoding encoding, double* out, std::size_t n, bool round_to_f32,
                   cudaStream_t stream) {
    const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    if (blocks) decode_kernel<<<blocks, 256, 0, stream>>>(in, encoding, out, n, round_to_f32);
}

}  // namespace diffract::linalg::cuda
