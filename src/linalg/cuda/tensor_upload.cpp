#include <algorithm>
#include <cstring>

#include "tensor_upload_impl.hpp"

namespace diffract::linalg::cuda {

TensorUpload::TensorUpload(cudaStream_t compute) : compute_(compute) {
    DIFFRACT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    for (int s = 0; s < 2; ++s) {
        staging_[s] = std::make_unique<PinnedBuffer>(kChunkBytes);
        raw_[s] = std::make_unique<DeviceBuffer<std::byte>>(kChunkBytes);
        DIFFRACT_CUDA_CHECK(cudaEventCreateWithFlags(&copied_[s], cudaEventDisableTiming));
        DIFFRACT_CUDA_CHECK(cudaEventCreateWithFlags(&decoded_[s], cudaEventDisableTiming));
    }
}

TensorUpload::~TensorUpload() {
    // Nothing may still read the staging buffers or write the raw ones when they are freed.
    cudaStreamSynchronize(copy_);
    cudaStreamSynchronize(compute_);
    for (int s = 0; s < 2; ++s) {
        cudaEventDestroy(copied_[s]);
        cudaEventDestroy(decoded_[s]);
    }
    cudaStreamDestroy(copy_);
}

void TensorUpload::decode_into(const std::byte* src, std::size_t n, Encoding encoding, bool round_to_f32,
                               double* dst) {
    const std::size_t size = encoding_size(encoding), per_chunk = kChunkBytes / size;
    for (std::size_t chunk = 0, done = 0; done < n; ++chunk) {
        const int slot = static_cast<int>(chunk % 2);
        const std::size_t count = std::min(per_chunk, n - done);
        // The staging buffer is free once its previous transfer (two chunks back, or the tail of
        // the previous tensor) has finished; an event never recorded counts as finished.
        DIFFRACT_CUDA_CHECK(cudaEventSynchronize(copied_[slot]));
        std::memcpy(staging_[slot]->ptr, src + done * size, count * size);
        // The raw device buffer is free once the decode that read it has run.
        DIFFRACT_CUDA_CHECK(cudaStreamWaitEvent(copy_, decoded_[slot], 0));
        DIFFRACT_CUDA_CHECK(cudaMemcpyAsync(raw_[slot]->ptr, staging_[slot]->ptr, count * size,
                                            cudaMemcpyHostToDevice, copy_));
        DIFFRACT_CUDA_CHECK(cudaEventRecord(copied_[slot], copy_));
        DIFFRACT_CUDA_CHECK(cudaStreamWaitEvent(compute_, copied_[slot], 0));
        decode_to_f64(raw_[slot]->ptr, encoding, dst + done, count, round_to_f32, compute_);
        DIFFRACT_CUDA_CHECK(cudaGetLastError());
        DIFFRACT_CUDA_CHECK(cudaEventRecord(decoded_[slot], compute_));
        done += count;
    }
}

}  // namespace diffract::linalg::cuda
