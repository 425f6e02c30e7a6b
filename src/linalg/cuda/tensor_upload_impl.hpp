// Uploading a stored tensor to the device at its storage width and decoding it there, with the
// three stages overlapped: the host copies chunk i+1 from the mapping into one pinned staging
// buffer while the copy stream transfers chunk i from the other and the compute stream decodes
// chunk i−1. A bf16 tensor crosses the bus at 2 bytes an element instead of the 8 of f64.
#pragma once

#include <cstddef>
#include <memory>

#include "decode_impl.hpp"
#include "device_buffer_impl.hpp"

namespace diffract::linalg::cuda {

class TensorUpload {
public:
    // Decodes onto `compute` (the stream the caller's products run on, so they follow the decode).
    explicit TensorUpload(cudaStream_t compute);
    ~TensorUpload();
    TensorUpload(const TensorUpload&) = delete;
    TensorUpload& operator=(const TensorUpload&) = delete;

    // dst[0, n) = the n elements at `src` (host memory, `encoding`) as f64, queued on the compute
    // stream; returns when the host has handed over every chunk (src may then be released).
    void decode_into(const std::byte* src, std::size_t n, Encoding encoding, bool round_to_f32, double* dst);

private:
    static constexpr std::size_t kChunkBytes = std::size_t{32} << 20;
    cudaStream_t compute_ = nullptr, copy_ = nullptr;
    std::unique_ptr<PinnedBuffer> staging_[2];
    std::unique_ptr<DeviceBuffer<std::byte>> raw_[2];
    cudaEvent_t copied_[2] = {}, decoded_[2] = {};
};

}  // namespace diffract::linalg::cuda
