// Device and pinned host allocations owned by scope (freed on every path, exceptions included).
#pragma once

#include <cstddef>

#include "cuda_check_impl.hpp"

namespace diffract::linalg::cuda {

template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    std::size_t n = 0;
    explicit DeviceBuffer(std::size_t count) : n(count) {
        if (count) DIFFRACT_CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(T)));
    }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Page-locked host memory: the only kind a host-to-device copy overlaps with other work from.
struct PinnedBuffer {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    explicit PinnedBuffer(std::size_t size) : bytes(size) { DIFFRACT_CUDA_CHECK(cudaMallocHost(&ptr, size)); }
    ~PinnedBuffer() { cudaFreeHost(ptr); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

}  // namespace diffract::linalg::cuda
