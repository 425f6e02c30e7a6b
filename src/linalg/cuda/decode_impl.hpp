// Device kernels, compiled by nvcc (decode.cu) and called from the C++20 host code of the backend.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace diffract::linalg::cuda {

// Storage encodings the device decodes itself (other dtypes are decoded on the host and sent as f64).
enum class Encoding : int { bf16, f16, f32, f64 };

inline std::size_t encoding_size(Encoding e) { return e == Encoding::f64 ? 8 : (e == Encoding::f32 ? 4 : 2); }

// out[i] = the value of element i of `in` (n elements, `encoding`) as f64, on `stream`. With
// `round_to_f32`, an f64 element is rounded to f32 first (what the f32 precision reads); the other
// encodings are exact in f32 already.
void decode_to_f64(const void* in, Encoding encoding, double* out, std::size_t n, bool round_to_f32,
                   cudaStream_t stream);

}  // namespace diffract::linalg::cuda
