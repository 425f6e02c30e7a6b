#include <vector>

#include "gram_products_impl.hpp"

namespace diffract::linalg::cuda {
namespace {

class DeviceGramProducts final : public GramProducts {
public:
    DeviceGramProducts(cublasHandle_t blas, cudaStream_t stream, TensorUpload& upload, std::int64_t k,
                       bool with_base)
        : blas_(blas),
          stream_(stream),
          upload_(upload),
          k_(checked_int(k, "dimension")),
          with_base_(with_base),
          bb_(with_base ? static_cast<std::size_t>(k) * k : 0),
          mm_(static_cast<std::size_t>(k) * k),
          bm_(mm_.n),
          dd_(mm_.n) {}

    void add(const double* b, const double* m, const double* d, std::int64_t len64, bool short_side_rows,
             bool first) override {
        const int len = checked_int(len64, "dimension");
        const auto n = static_cast<std::size_t>(k_) * static_cast<std::size_t>(len);
        if (!slab_ || slab_->n < 3 * n) {
            DIFFRACT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old slabs may still be read
            slab_ = std::make_unique<DeviceBuffer<double>>(3 * n);
        }
        double *db = slab_->ptr, *dm = db + n, *dd = dm + n;
        // Queued on the stream after the previous slab's products: the buffers are free by then.
        upload_.decode_into(reinterpret_cast<const std::byte*>(b), n, Encoding::f64, false, db);
        upload_.decode_into(reinterpret_cast<const std::byte*>(m), n, Encoding::f64, false, dm);
        upload_.decode_into(reinterpret_cast<const std::byte*>(d), n, Encoding::f64, false, dd);
        // Row-major len × k is column-major Xᵀ (k × len, ld k): XᵀX = syrk 'N'. Row-major k × len is
        // column-major X (len × k, ld len): syrk 'T'. As the CPU's GramProducts.
        const auto op = short_side_rows ? CUBLAS_OP_T : CUBLAS_OP_N;
        const int ld = short_side_rows ? len : k_;
        const double one = 1.0, beta = first ? 0.0 : 1.0;
        if (with_base_)
            DIFFRACT_CUDA_CHECK(
                cublasDsyrk(blas_, CUBLAS_FILL_MODE_LOWER, op, k_, len, &one, db, ld, &beta, bb_.ptr, k_));
        DIFFRACT_CUDA_CHECK(
            cublasDsyrk(blas_, CUBLAS_FILL_MODE_LOWER, op, k_, len, &one, dm, ld, &beta, mm_.ptr, k_));
        DIFFRACT_CUDA_CHECK(
            cublasDsyrk(blas_, CUBLAS_FILL_MODE_LOWER, op, k_, len, &one, dd, ld, &beta, dd_.ptr, k_));
        DIFFRACT_CUDA_CHECK(cublasDgemm(blas_, short_side_rows ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        short_side_rows ? CUBLAS_OP_N : CUBLAS_OP_T, k_, k_, len, &one, db,
                                        ld, dm, ld, &beta, bm_.ptr, k_));
    }

    void results(std::vector<double>& bb, std::vector<double>& mm, std::vector<double>& bm,
                 std::vector<double>& dd) override {
        auto fetch = [&](const DeviceBuffer<double>& from, std::vector<double>& to) {
            to.resize(from.n);
            if (from.n)
                DIFFRACT_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.ptr, from.n * sizeof(double),
                                                    cudaMemcpyDeviceToHost, stream_));
        };
        fetch(bb_, bb), fetch(mm_, mm), fetch(bm_, bm), fetch(dd_, dd);
        DIFFRACT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

private:
    cublasHandle_t blas_;
    cudaStream_t stream_;
    TensorUpload& upload_;
    int k_;
    bool with_base_;
    DeviceBuffer<double> bb_, mm_, bm_, dd_;
    std::unique_ptr<DeviceBuffer<double>> slab_;
};

}  // namespace

std::unique_ptr<GramProducts> make_gram_products(cublasHandle_t blas, cudaStream_t stream,
                                                 TensorUpload& upload, std::int64_t k, bool with_base) {
    return std::make_unique<DeviceGramProducts>(blas, stream, upload, k, with_base);
}

}  // namespace diffract::linalg::cuda
