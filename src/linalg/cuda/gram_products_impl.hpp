// compare's Gram products on the device (gram_pair.hpp): each slab of the base, the model and their
// difference is uploaded through the backend's TensorUpload, and three syrk and one gemm add it to
// four k × k f64 accumulators that stay on the device until results(). Everything is queued on the
// backend's stream, so the host reads and differences the next slab while the device computes.
#pragma once

#include <memory>

#include "diffract/linalg/gram_pair.hpp"
#include "tensor_upload_impl.hpp"

namespace diffract::linalg::cuda {

std::unique_ptr<GramProducts> make_gram_products(cublasHandle_t blas, cudaStream_t stream,
                                                 TensorUpload& upload, std::int64_t k, bool with_base);

}  // namespace diffract::linalg::cuda
