// Checking every CUDA runtime, cuBLAS and cuSOLVER call by name: a failure throws with the call's
// text and the library's own message, so a GPU error reads like any other diffract error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <stdexcept>
#include <string>

#include "../checked_int_impl.hpp"  // the 32-bit dimension check, shared with the CPU backend

namespace diffract::linalg::cuda {

inline void check(cudaError_t e, const char* call) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("CUDA: ") + call + ": " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* call) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuBLAS: ") + call + ": status " +
                                 std::to_string(static_cast<int>(s)));
}
inline void check(cusolverStatus_t s, const char* call) {
    if (s != CUSOLVER_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuSOLVER: ") + call + ": status " +
                                 std::to_string(static_cast<int>(s)));
}

}  // namespace diffract::linalg::cuda

#define DIFFRACT_CUDA_CHECK(call) ::diffract::linalg::cuda::check((call), #call)
