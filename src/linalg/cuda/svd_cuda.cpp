// The CUDA backend (cuBLAS + cuSOLVER). Same contract as the CPU backend: row-major input,
// ascending singular values, U (m × k) and V (n × k).
//
// Values only: the Gram route on the device — the matrix is uploaded at its storage precision
// (f32: half the bytes of f64), widened to f64 on the device, G = WᵀW (or WWᵀ, the smaller side) by
// cublasDsyrk, eigenvalues by cusolverDnDsyevd; with the same ill-conditioning guard as the CPU
// route, falling back to cusolverDnDgesvd. Vectors: cusolverDnDgesvdj (Jacobi, economy) on the
// col-major view. Each backend instance owns its handles, stream and workspace (one per worker
// thread), so transfers of one matrix overlap with another thread's compute.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "cuda_check_impl.hpp"
#include "diffract/linalg/backend.hpp"
#include "widen_impl.hpp"

namespace diffract::linalg {
namespace {

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

class CudaBackend final : public Backend {
public:
    CudaBackend() {
        int devices = 0;
        if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
            throw std::runtime_error("--device cuda: no CUDA device is available");
        DIFFRACT_CUDA_CHECK(cudaStreamCreate(&stream_));
        DIFFRACT_CUDA_CHECK(cublasCreate(&blas_));
        DIFFRACT_CUDA_CHECK(cublasSetStream(blas_, stream_));
        DIFFRACT_CUDA_CHECK(cusolverDnCreate(&solver_));
        DIFFRACT_CUDA_CHECK(cusolverDnSetStream(solver_, stream_));
    }
    ~CudaBackend() override {
        cusolverDnDestroy(solver_);
        cublasDestroy(blas_);
        cudaStreamDestroy(stream_);
    }
    std::string name() const override { return "cuda"; }
    std::vector<double> singular_values(const Matrix<float>& w, SvdRoute r) override {
        return values(upload(w), w.rows, w.cols, r);
    }
    std::vector<double> singular_values(const Matrix<double>& w, SvdRoute r) override {
        return values(upload(w), w.rows, w.cols, r);
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
    std::unique_ptr<DeviceBuffer<double>> upload(const Matrix<double>& w) {
        auto d = std::make_unique<DeviceBuffer<double>>(w.data.size());
        DIFFRACT_CUDA_CHECK(cudaMemcpyAsync(d->ptr, w.data.data(), w.data.size() * sizeof(double),
                                            cudaMemcpyHostToDevice, stream_));
        return d;
    }
    std::unique_ptr<DeviceBuffer<double>> upload(const Matrix<float>& w) {
        DeviceBuffer<float> staged(w.data.size());
        DIFFRACT_CUDA_CHECK(cudaMemcpyAsync(staged.ptr, w.data.data(), w.data.size() * sizeof(float),
                                            cudaMemcpyHostToDevice, stream_));
        auto d = std::make_unique<DeviceBuffer<double>>(w.data.size());
        cuda::widen_to_f64(staged.ptr, d->ptr, w.data.size(), stream_);
        DIFFRACT_CUDA_CHECK(cudaGetLastError());
        DIFFRACT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `staged` is freed on return
        return d;
    }

    std::vector<double> values(std::unique_ptr<DeviceBuffer<double>> a, std::int64_t m, std::int64_t n,
                               SvdRoute route) {
        if (m == 0 || n == 0) return {};
        if (route == SvdRoute::gesdd) return vectors_or_values(*a, m, n, false).s;
        const int k = static_cast<int>(std::min(m, n)), depth = static_cast<int>(std::max(m, n));
        DeviceBuffer<double> g(static_cast<std::size_t>(k) * k);
        const double one = 1.0, zero = 0.0;
        // Col-major Wᵀ is n × m (ld n). n ≤ m: WᵀW = (Wᵀ)(Wᵀ)ᵀ, 'N'. m < n: WWᵀ = (Wᵀ)ᵀ(Wᵀ), 'T'.
        DIFFRACT_CUDA_CHECK(cublasDsyrk(blas_, CUBLAS_FILL_MODE_LOWER, n <= m ? CUBLAS_OP_N : CUBLAS_OP_T, k,
                                        depth, &one, a->ptr, static_cast<int>(n), &zero, g.ptr, k));
        a.reset();
        DeviceBuffer<double> lambda(static_cast<std::size_t>(k));
        DeviceBuffer<int> info(1);
        int lwork = 0;
        DIFFRACT_CUDA_CHECK(cusolverDnDsyevd_bufferSize(
            solver_, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_LOWER, k, g.ptr, k, lambda.ptr, &lwork));
        DeviceBuffer<double> work(static_cast<std::size_t>(lwork));
        DIFFRACT_CUDA_CHECK(cusolverDnDsyevd(solver_, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_LOWER, k,
                                             g.ptr, k, lambda.ptr, work.ptr, lwork, info.ptr));
        std::vector<double> host(static_cast<std::size_t>(k));
        int host_info = 0;
        DIFFRACT_CUDA_CHECK(cudaMemcpyAsync(host.data(), lambda.ptr, host.size() * sizeof(double),
                                            cudaMemcpyDeviceToHost, stream_));
        DIFFRACT_CUDA_CHECK(
            cudaMemcpyAsync(&host_info, info.ptr, sizeof(int), cudaMemcpyDeviceToHost, stream_));
        DIFFRACT_CUDA_CHECK(cudaStreamSynchronize(stream_));
        if (host_info != 0)
            throw std::runtime_error("cuSOLVER syevd failed (info " + std::to_string(host_info) + ")");
        if (route == SvdRoute::auto_route && host.back() > 0 &&
            host.front() < kGramConditionGuard * host.back())
            return {};  // signal: caller falls back
        for (auto& l : host) l = std::sqrt(std::max(l, 0.0));
        return host;
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
};

// The Gram route signals an ill-conditioned spectrum with an empty result; recompute with Jacobi.
class GuardedCudaBackend final : public Backend {
public:
    std::string name() const override { return inner_.name(); }
    std::vector<double> singular_values(const Matrix<float>& w, SvdRoute r) override { return guarded(w, r); }
    std::vector<double> singular_values(const Matrix<double>& w, SvdRoute r) override {
        return guarded(w, r);
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
