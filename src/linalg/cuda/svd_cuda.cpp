// The CUDA backend (cuBLAS + cuSOLVER). Same contract as the CPU backend: row-major input,
// ascending singular values, U (m × k) and V (n × k).
//
// Values only: the Gram route on the device. A matrix or stored tensor is uploaded at its storage
// width (bf16/f16: 2 bytes an element) in chunks overlapped with its decoding to f64 on the device
// (tensor_upload_impl.hpp); G = WᵀW (or WWᵀ, the smaller side) by cublasDsyrk, or, for the heads of
// a projection, one cublasDgemmStridedBatched over the planned batch (gram_batch.hpp) and one
// cusolverDnXsyevBatched; eigenvalues of a lone matrix by cusolverDnDsyevd. The ill-conditioning
// guard is the CPU's (singular_values_from_gram); a guarded matrix is recomputed by Jacobi SVD.
// Vectors: cusolverDnDgesvdj (Jacobi, economy) on the col-major view. Each backend instance owns
// its handles, streams, staging buffers and workspace (one per worker thread), so one thread's
// transfers also overlap another's compute.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cuda_check_impl.hpp"
#include "device_buffer_impl.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/local_rank.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/linalg/gram_batch.hpp"
#include "diffract/linalg/gram_pair.hpp"
#include "gram_products_impl.hpp"
#include "tensor_upload_impl.hpp"

namespace diffract::linalg {
namespace {

using cuda::DeviceBuffer;
using cuda::Encoding;

// The device decodes these storage dtypes itself; the others are decoded on the host.
std::optional<Encoding> device_encoding(DType t) {
    switch (t) {
        case DType::BF16:
            return Encoding::bf16;
        case DType::F16:
            return Encoding::f16;
        case DType::F32:
            return Encoding::f32;
        case DType::F64:
            return Encoding::f64;
        default:
            return std::nullopt;
    }
}

class CudaBackend final : public Backend {
public:
    CudaBackend() {
        int devices = 0;
        if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
            throw InputError("--device cuda: no CUDA device is available (nvidia-smi lists none)");
        // Under mpirun each rank of a machine takes its own GPU (this thread's current device).
        DIFFRACT_CUDA_CHECK(cudaSetDevice(local_rank() % devices));
        DIFFRACT_CUDA_CHECK(cudaStreamCreate(&stream_));
        DIFFRACT_CUDA_CHECK(cublasCreate(&blas_));
        DIFFRACT_CUDA_CHECK(cublasSetStream(blas_, stream_));
        DIFFRACT_CUDA_CHECK(cusolverDnCreate(&solver_));
        DIFFRACT_CUDA_CHECK(cusolverDnSetStream(solver_, stream_));
        upload_ = std::make_unique<cuda::TensorUpload>(stream_);
    }
    ~CudaBackend() override {
        upload_.reset();
        cusolverDnDestroy(solver_);
        cublasDestroy(blas_);
        cudaStreamDestroy(stream_);
    }
    std::vector<double> singular_values(const Matrix<float>& w, SvdRoute r) override {
        return values(upload(w), w.rows, w.cols, r);
    }
    std::vector<double> singular_values(const Matrix<double>& w, SvdRoute r) override {
        return values(upload(w), w.rows, w.cols, r);
    }
    // Blocks whose Gram spectrum trips the guard come back empty (the guarded wrapper recomputes).
    std::vector<std::vector<double>> block_singular_values(const TensorInfo& t,
                                                           std::span<const MatrixBlock> blocks, bool f64,
                                                           SvdRoute route) override {
        if (route == SvdRoute::gesdd) return block_singular_values_one_by_one(*this, t, blocks, f64, route);
        for (const auto& b : blocks) check_block_inside(t, b);  // the device indexes the tensor directly
        std::vector<std::vector<double>> out(blocks.size());
        const auto tensor = upload(t, f64);
        for (const auto& batch : plan_gram_batches(blocks, stored_cols(t))) {
            auto lambdas = batch_gram_eigenvalues(tensor->ptr, batch);
            for (std::size_t p = 0; p < batch.members.size(); ++p) {
                auto s = singular_values_from_gram(std::move(lambdas[p]), route);
                if (s) out[batch.members[p]] = std::move(*s);
            }
        }
        return out;
    }
    std::vector<double> symmetric_eigen(std::span<double> a, std::int64_t k, bool vectors) override {
        if (k == 0) return {};
        // cuSOLVER never sees NaN/Inf: the lower triangle, which is what syevd reads.
        std::int64_t bad = 0;
        for (std::int64_t j = 0; j < k; ++j)
            for (std::int64_t i = j; i < k; ++i)
                bad += std::isfinite(a[static_cast<std::size_t>(i + j * k)]) ? 0 : 1;
        if (bad > 0)
            throw_numeric_error("cuSOLVER syevd: " + nonfinite_what(bad) + " in a " + std::to_string(k) +
                                "x" + std::to_string(k) + " Gram matrix");
        const auto g = upload(a);
        auto lambda = gram_eigenvalues(*g, checked_int(k, "dimension"), vectors);
        if (vectors) {
            const auto v = download(*g);
            std::copy(v.begin(), v.end(), a.begin());
        }
        return lambda;
    }
    std::vector<double> multiply(std::span<const double> a, bool transpose_a, std::span<const double> b,
                                 bool transpose_b, std::int64_t m, std::int64_t n,
                                 std::int64_t inner) override {
        const int mi = checked_int(m, "dimension"), ni = checked_int(n, "dimension"),
                  ki = checked_int(inner, "dimension");
        DeviceBuffer<double> c(static_cast<std::size_t>(m) * static_cast<std::size_t>(n));
        if (c.n == 0) return {};
        if (ki == 0) return std::vector<double>(c.n, 0.0);
        const auto da = upload(a), db = upload(b);
        const double one = 1.0, zero = 0.0;
        DIFFRACT_CUDA_CHECK(cublasDgemm(
            blas_, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, mi, ni,
            ki, &one, da->ptr, transpose_a ? ki : mi, db->ptr, transpose_b ? ni : ki, &zero, c.ptr, mi));
        return download(c);
    }
    std::unique_ptr<GramProducts> gram_products(std::int64_t k, bool with_base) override {
        return cuda::make_gram_products(blas_, stream_, *upload_, k, with_base);
    }
    Svd svd(const Matrix<float>& w) override { return vectors(upload(w), w.rows, w.cols); }
    Svd svd(const Matrix<double>& w) override { return vectors(upload(w), w.rows, w.cols); }
    double measure_matmul_gflops(int n) override {
        const auto count = static_cast<std::size_t>(n) * n;
        DeviceBuffer<float> a(count), b(count), c(count);
        DIFFRACT_CUDA_CHECK(cudaMemsetAsync(a.ptr, 0, count * sizeof(float), stream_));
        DIFFRACT_CUDA_CHECK(cudaMemsetAsync(b.ptr, 0, count * sizeof(float), stream_));
        cudaEvent_t start, stop;
        DIFFRACT_CUDA_CHECK(cudaEventCreate(&start));
        DIFFRACT_CUDA_CHECK(cudaEventCreate(&stop));
        const float one = 1, zero = 0;
        float best_ms = 1e30f;
        for (int rep = 0; rep < 4; ++rep) {  // the first is a warm-up
            DIFFRACT_CUDA_CHECK(cudaEventRecord(start, stream_));
            DIFFRACT_CUDA_CHECK(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.ptr, n, b.ptr,
                                            n, &zero, c.ptr, n));
            DIFFRACT_CUDA_CHECK(cudaEventRecord(stop, stream_));
            DIFFRACT_CUDA_CHECK(cudaEventSynchronize(stop));
            float ms = 0;
            DIFFRACT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
            if (rep > 0) best_ms = std::min(best_ms, ms);
        }
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        return 2.0 * n * n * static_cast<double>(n) / (best_ms * 1e-3) / 1e9;
    }

private:
    // The matrix on the device as f64, row-major (= col-major Wᵀ, n × m, ld n).
    template <typename T>
    std::unique_ptr<DeviceBuffer<double>> upload(const Matrix<T>& w) {
        require_finite(std::span<const T>(w.data), "cuSOLVER");  // the callers count NaN/Inf first
        auto d = std::make_unique<DeviceBuffer<double>>(w.data.size());
        upload_->decode_into(reinterpret_cast<const std::byte*>(w.data.data()), w.data.size(),
                             std::is_same_v<T, float> ? Encoding::f32 : Encoding::f64, false, d->ptr);
        return d;
    }

    // The whole stored tensor on the device as f64 holding what read_matrix<T> reads (T = double
    // when `f64`): bf16/f16/f32/f64 decoded on the device, other dtypes (f8, GGUF block types) and
    // reordered rows (GGUF RoPE layout) on the host.
    std::unique_ptr<DeviceBuffer<double>> upload(const TensorInfo& t, bool f64) {
        const auto n = static_cast<std::size_t>(t.numel());
        auto d = std::make_unique<DeviceBuffer<double>>(n);
        const auto e = device_encoding(t.dtype);
        if (e && t.rope_head_rows == 0) {  // rows in stored order: the device decodes the bytes as they are
            if (t.nbytes != n * cuda::encoding_size(*e))
                throw_input_error(t.path(), t.name, "byte count does not match the shape");
            upload_->decode_into(t.bytes().data(), n, *e, !f64, d->ptr);
        } else {
            const auto host = read_widened(t, {0, stored_rows(t), 0, stored_cols(t), false}, f64);
            upload_->decode_into(reinterpret_cast<const std::byte*>(host.data.data()), n, Encoding::f64,
                                 false, d->ptr);
        }
        return d;
    }

    // Eigenvalues (ascending, one vector per member) of the Gram matrices of one planned batch of
    // blocks of the tensor at `tensor` (f64 on the device).
    std::vector<std::vector<double>> batch_gram_eigenvalues(const double* tensor, const GramBatch& batch) {
        const int k = checked_int(batch.order, "dimension"), depth = checked_int(batch.depth, "dimension"),
                  lda = checked_int(batch.lda, "leading dimension");
        const auto count = batch.members.size();
        const auto kk = static_cast<std::size_t>(k) * k;
        DeviceBuffer<double> g(kk * count);
        const double one = 1.0, zero = 0.0;
        const double* a = tensor + batch.offset;
        // trans = false: A is k × depth, G = A Aᵀ; trans = true: A is depth × k, G = Aᵀ A.
        const auto op_left = batch.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
        const auto op_right = batch.trans ? CUBLAS_OP_N : CUBLAS_OP_T;
        if (count == 1)
            DIFFRACT_CUDA_CHECK(
                cublasDsyrk(blas_, CUBLAS_FILL_MODE_LOWER, op_left, k, depth, &one, a, lda, &zero, g.ptr, k));
        else
            DIFFRACT_CUDA_CHECK(cublasDgemmStridedBatched(
                blas_, op_left, op_right, k, k, depth, &one, a, lda, batch.stride, a, lda, batch.stride,
                &zero, g.ptr, k, static_cast<long long>(kk), static_cast<int>(count)));
        std::vector<double> lambda(kk == 0 ? 0 : static_cast<std::size_t>(k) * count);
        if (count == 1) {
            lambda = gram_eigenvalues(g, k);
        } else {
            // syevBatched limits n · lda · batch to INT32_MAX: run the batch in slices that fit.
            const std::size_t slice = std::max<std::size_t>(1, std::numeric_limits<int>::max() / kk);
            for (std::size_t first = 0; first < count; first += slice) {
                const std::size_t len = std::min(slice, count - first);
                batched_eigenvalues(g.ptr + first * kk, k, len, lambda.data() + first * k);
            }
        }
        std::vector<std::vector<double>> out;
        for (std::size_t p = 0; p < count; ++p)
            out.emplace_back(lambda.begin() + static_cast<std::ptrdiff_t>(p * k),
                             lambda.begin() + static_cast<std::ptrdiff_t>((p + 1) * k));
        return out;
    }

    // Eigenvalues of `len` column-major k × k matrices (lower triangles) at `g`, into host `out`.
    void batched_eigenvalues(double* g, int k, std::size_t len, double* out) {
        cusolverDnParams_t params = nullptr;
        DIFFRACT_CUDA_CHECK(cusolverDnCreateParams(&params));
        DeviceBuffer<double> w(static_cast<std::size_t>(k) * len);
        DeviceBuffer<int> info(len);
        std::size_t device_bytes = 0, host_bytes = 0;
        const auto batch = static_cast<std::int64_t>(len);
        DIFFRACT_CUDA_CHECK(cusolverDnXsyevBatched_bufferSize(
            solver_, params, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_LOWER, k, CUDA_R_64F, g, k,
            CUDA_R_64F, w.ptr, CUDA_R_64F, &device_bytes, &host_bytes, batch));
        DeviceBuffer<std::byte> device_work(device_bytes);
        std::vector<std::byte> host_work(host_bytes);
        DIFFRACT_CUDA_CHECK(cusolverDnXsyevBatched(
            solver_, params, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_LOWER, k, CUDA_R_64F, g, k,
            CUDA_R_64F, w.ptr, CUDA_R_64F, device_work.ptr, device_bytes,
            host_bytes ? host_work.data() : nullptr, host_bytes, info.ptr, batch));
        std::vector<int> host_info(len);
        DIFFRACT_CUDA_CHECK(
            cudaMemcpyAsync(out, w.ptr, w.n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
        DIFFRACT_CUDA_CHECK(
            cudaMemcpyAsync(host_info.data(), info.ptr, len * sizeof(int), cudaMemcpyDeviceToHost, stream_));
        DIFFRACT_CUDA_CHECK(cudaStreamSynchronize(stream_));
        cusolverDnDestroyParams(params);
        for (std::size_t i = 0; i < len; ++i)
            if (host_info[i] != 0)
                throw_numeric_error("cuSOLVER syevBatched failed on matrix " + std::to_string(i) + " (info " +
                                    std::to_string(host_info[i]) + ")");
    }

    // Eigenvalues (ascending) of one column-major symmetric k × k matrix (lower triangle) on the
    // device; with `vectors` the matrix is overwritten by its eigenvectors.
    std::vector<double> gram_eigenvalues(DeviceBuffer<double>& g, int k, bool vectors = false) {
        const auto jobz = vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
        DeviceBuffer<double> lambda(static_cast<std::size_t>(k));
        DeviceBuffer<int> info(1);
        int lwork = 0;
        DIFFRACT_CUDA_CHECK(cusolverDnDsyevd_bufferSize(solver_, jobz, CUBLAS_FILL_MODE_LOWER, k, g.ptr, k,
                                                        lambda.ptr, &lwork));
        DeviceBuffer<double> work(static_cast<std::size_t>(lwork));
        DIFFRACT_CUDA_CHECK(cusolverDnDsyevd(solver_, jobz, CUBLAS_FILL_MODE_LOWER, k, g.ptr, k, lambda.ptr,
                                             work.ptr, lwork, info.ptr));
        std::vector<double> host(static_cast<std::size_t>(k));
        int host_info = 0;
        DIFFRACT_CUDA_CHECK(cudaMemcpyAsync(host.data(), lambda.ptr, host.size() * sizeof(double),
                                            cudaMemcpyDeviceToHost, stream_));
        DIFFRACT_CUDA_CHECK(
            cudaMemcpyAsync(&host_info, info.ptr, sizeof(int), cudaMemcpyDeviceToHost, stream_));
        DIFFRACT_CUDA_CHECK(cudaStreamSynchronize(stream_));
        if (host_info != 0)
            throw_numeric_error("cuSOLVER syevd failed (info " + std::to_string(host_info) + ")");
        return host;
    }

    // A host vector of doubles on the device (through the staged, overlapped upload).
    std::unique_ptr<DeviceBuffer<double>> upload(std::span<const double> v) {
        auto d = std::make_unique<DeviceBuffer<double>>(v.size());
        upload_->decode_into(reinterpret_cast<const std::byte*>(v.data()), v.size(), Encoding::f64, false,
                             d->ptr);
        return d;
    }

    std::vector<double> download(const DeviceBuffer<double>& d) {
        std::vector<double> host(d.n);
        if (d.n)
            DIFFRACT_CUDA_CHECK(
                cudaMemcpyAsync(host.data(), d.ptr, d.n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
        DIFFRACT_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return host;
    }

    // Values of a matrix already on the device; empty when the auto route's guard trips (the
    // caller then recomputes with Jacobi).
    std::vector<double> values(std::unique_ptr<DeviceBuffer<double>> a, std::int64_t m, std::int64_t n,
                               SvdRoute route) {
        if (m == 0 || n == 0) return {};
        if (route == SvdRoute::gesdd) return vectors_or_values(*a, m, n, false).s;
        const MatrixBlock whole{0, m, 0, n, false};
        const auto batch = plan_gram_batches(std::span(&whole, 1), n).front();
        auto s = singular_values_from_gram(batch_gram_eigenvalues(a->ptr, batch).front(), route);
        return s ? std::move(*s) : std::vector<double>{};
    }

    Svd vectors(std::unique_ptr<DeviceBuffer<double>> a, std::int64_t m, std::int64_t n) {
        return vectors_or_values(*a, m, n, true);
    }

    // Jacobi SVD of the col-major n × m matrix Wᵀ = U' S V'ᵀ; W = V' S U'ᵀ (as on the CPU).
    Svd vectors_or_values(DeviceBuffer<double>& a, std::int64_t m, std::int64_t n, bool want_vectors) {
        const int lm = static_cast<int>(n), ln = static_cast<int>(m), k = std::min(lm, ln);
        gesvdjInfo_t params = nullptr;
        DIFFRACT_CUDA_CHECK(cusolverDnCreateGesvdjInfo(&params));
        DeviceBuffer<double> s(static_cast<std::size_t>(k)), u(static_cast<std::size_t>(lm) * k),
            v(static_cast<std::size_t>(ln) * k);
        DeviceBuffer<int> info(1);
        const auto jobz = want_vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
        int lwork = 0;
        DIFFRACT_CUDA_CHECK(cusolverDnDgesvdj_bufferSize(solver_, jobz, /*econ=*/1, lm, ln, a.ptr, lm, s.ptr,
                                                         u.ptr, lm, v.ptr, ln, &lwork, params));
        DeviceBuffer<double> work(static_cast<std::size_t>(lwork));
        DIFFRACT_CUDA_CHECK(cusolverDnDgesvdj(solver_, jobz, 1, lm, ln, a.ptr, lm, s.ptr, u.ptr, lm, v.ptr,
                                              ln, work.ptr, lwork, info.ptr, params));
        std::vector<double> hs(static_cast<std::size_t>(k)), hu(want_vectors ? u.n : 0),
            hv(want_vectors ? v.n : 0);
        int host_info = 0;
        DIFFRACT_CUDA_CHECK(
            cudaMemcpyAsync(hs.data(), s.ptr, hs.size() * sizeof(double), cudaMemcpyDeviceToHost, stream_));
        if (want_vectors) {
            DIFFRACT_CUDA_CHECK(cudaMemcpyAsync(hu.data(), u.ptr, hu.size() * sizeof(double),
                                                cudaMemcpyDeviceToHost, stream_));
            DIFFRACT_CUDA_CHECK(cudaMemcpyAsync(hv.data(), v.ptr, hv.size() * sizeof(double),
                                                cudaMemcpyDeviceToHost, stream_));
        }
        DIFFRACT_CUDA_CHECK(
            cudaMemcpyAsync(&host_info, info.ptr, sizeof(int), cudaMemcpyDeviceToHost, stream_));
        DIFFRACT_CUDA_CHECK(cudaStreamSynchronize(stream_));
        cusolverDnDestroyGesvdjInfo(params);
        if (host_info < 0)
            throw std::runtime_error("cuSOLVER gesvdj: invalid argument " + std::to_string(-host_info));
        if (host_info > 0)
            throw_numeric_error("cuSOLVER gesvdj did not converge on a " + std::to_string(m) + "x" +
                                std::to_string(n) + " matrix (info " + std::to_string(host_info) + ")");
        // gesvdj returns descending values: reverse into ascending; W's U = V', W's V = U'.
        Svd out;
        out.s.assign(hs.rbegin(), hs.rend());
        if (want_vectors) {
            out.u = Matrix<double>(m, k);
            out.v = Matrix<double>(n, k);
            for (int c = 0; c < k; ++c) {
                const int src = k - 1 - c;
                for (std::int64_t i = 0; i < m; ++i)
                    out.u(i, c) = hv[static_cast<std::size_t>(i + static_cast<std::int64_t>(src) * ln)];
                for (std::int64_t j = 0; j < n; ++j)
                    out.v(j, c) = hu[static_cast<std::size_t>(j + static_cast<std::int64_t>(src) * lm)];
            }
        }
        return out;
    }

    cudaStream_t stream_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    cusolverDnHandle_t solver_ = nullptr;
    std::unique_ptr<cuda::TensorUpload> upload_;
};

// The Gram route signals an ill-conditioned spectrum with an empty result; recompute with Jacobi.
class GuardedCudaBackend final : public Backend {
public:
    std::vector<double> singular_values(const Matrix<float>& w, SvdRoute r) override { return guarded(w, r); }
    std::vector<double> singular_values(const Matrix<double>& w, SvdRoute r) override {
        return guarded(w, r);
    }
    std::vector<std::vector<double>> block_singular_values(const TensorInfo& t,
                                                           std::span<const MatrixBlock> blocks, bool f64,
                                                           SvdRoute route) override {
        auto out = inner_.block_singular_values(t, blocks, f64, route);
        for (std::size_t i = 0; i < blocks.size(); ++i)
            if (out[i].empty() && blocks[i].rows > 0 && blocks[i].cols > 0)
                out[i] =
                    block_singular_values_one_by_one(inner_, t, blocks.subspan(i, 1), f64, SvdRoute::gesdd)
                        .front();
        return out;
    }
    std::vector<double> symmetric_eigen(std::span<double> a, std::int64_t k, bool vectors) override {
        return inner_.symmetric_eigen(a, k, vectors);
    }
    std::vector<double> multiply(std::span<const double> a, bool transpose_a, std::span<const double> b,
                                 bool transpose_b, std::int64_t m, std::int64_t n,
                                 std::int64_t inner) override {
        return inner_.multiply(a, transpose_a, b, transpose_b, m, n, inner);
    }
    std::unique_ptr<GramProducts> gram_products(std::int64_t k, bool with_base) override {
        return inner_.gram_products(k, with_base);
    }
    Svd svd(const Matrix<float>& w) override { return inner_.svd(w); }
    Svd svd(const Matrix<double>& w) override { return inner_.svd(w); }
    double measure_matmul_gflops(int n) override { return inner_.measure_matmul_gflops(n); }

private:
    template <typename T>
    std::vector<double> guarded(const Matrix<T>& w, SvdRoute r) {
        auto s = inner_.singular_values(w, r);
        if (s.empty() && w.rows > 0 && w.cols > 0) s = inner_.singular_values(w, SvdRoute::gesdd);
        return s;
    }
    CudaBackend inner_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<GuardedCudaBackend>(); }

}  // namespace diffract::linalg
