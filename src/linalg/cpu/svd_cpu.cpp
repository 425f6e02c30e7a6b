#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "block_values_impl.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/linalg/gram_batch.hpp"
#include "diffract/linalg/gram_pair.hpp"
#include "lapack_impl.hpp"

namespace diffract::linalg {
namespace {

// The f32 Gram product of the column-major order × depth matrix A (trans: Aᵀ, depth × order) at
// leading dimension lda: lower triangle, column-major order × order. nullopt when it overflows: finite
// f32 entries up to ~3e38 (a corrupted weight, say) have squares beyond f32, which the f64 product holds.
std::optional<PooledVector<float>> f32_gram_product(bool trans, int order, int depth, const float* a,
                                                    int lda) {
    PooledVector<float> g(static_cast<std::size_t>(order) * order);
    const float one = 1.0f, zero = 0.0f;
    ssyrk_("L", trans ? "T" : "N", &order, &depth, &one, a, &lda, &zero, g.data(), &order);
    for (std::int64_t j = 0; j < order; ++j)
        for (std::int64_t i = j; i < order; ++i)
            if (!std::isfinite(g[static_cast<std::size_t>(i + j * order)])) return std::nullopt;
    return g;
}

// A row-major m × n matrix is, to column-major LAPACK, the n × m matrix Wᵀ. We factor Wᵀ = U' S V'ᵀ,
// so W = V' S U'ᵀ: W's left vectors are V' and its right vectors U'.
template <typename T>
Svd gesdd(const Matrix<T>& w, bool vectors) {
    const int lm = lapack::checked_int(w.cols, "rows");  // LAPACK's m: rows of Wᵀ
    const int ln = lapack::checked_int(w.rows, "cols");
    const int k = std::min(lm, ln);
    Svd out;
    if (k == 0) return out;
    require_finite(std::span<const T>(w.data), "LAPACK gesdd");  // the callers count NaN/Inf first
    std::vector<T> a(w.data.begin(), w.data.end());              // gesdd destroys its input
    std::vector<T> s(static_cast<std::size_t>(k));
    std::vector<T> u(vectors ? static_cast<std::size_t>(lm) * k : 1),
        vt(vectors ? static_cast<std::size_t>(k) * ln : 1);
    std::vector<int> iwork(8 * static_cast<std::size_t>(k));
    const char* jobz = vectors ? "S" : "N";
    const int lda = lm, ldu = vectors ? lm : 1, ldvt = vectors ? k : 1;
    int info = 0, lwork = -1;
    T query = 0;
    lapack::gesdd(jobz, &lm, &ln, a.data(), &lda, s.data(), u.data(), &ldu, vt.data(), &ldvt, &query, &lwork,
                  iwork.data(), &info);
    lwork = static_cast<int>(query) + 1;
    std::vector<T> work(static_cast<std::size_t>(lwork));
    lapack::gesdd(jobz, &lm, &ln, a.data(), &lda, s.data(), u.data(), &ldu, vt.data(), &ldvt, work.data(),
                  &lwork, iwork.data(), &info);
    if (info != 0)
        throw_numeric_error(
            fmt::format("LAPACK gesdd failed on a {}x{} matrix (info {})", w.rows, w.cols, info));
    // LAPACK returns descending values; we store ascending: component c of ours is k-1-c of LAPACK's.
    out.s.resize(static_cast<std::size_t>(k));
    for (int c = 0; c < k; ++c)
        out.s[static_cast<std::size_t>(c)] = static_cast<double>(s[static_cast<std::size_t>(k - 1 - c)]);
    if (vectors) {
        out.u = Matrix<double>(w.rows, k);  // W's U = V' : V'[i, c] = vt[c + i * k]
        out.v = Matrix<double>(w.cols, k);  // W's V = U' : U'[j, c] = u[j + c * lm]
        for (int c = 0; c < k; ++c) {
            const int src = k - 1 - c;
            for (std::int64_t i = 0; i < w.rows; ++i)
                out.u(i, c) = static_cast<double>(vt[static_cast<std::size_t>(src + i * k)]);
            for (std::int64_t j = 0; j < w.cols; ++j)
                out.v(j, c) =
                    static_cast<double>(u[static_cast<std::size_t>(j + static_cast<std::int64_t>(src) * lm)]);
        }
    }
    return out;
}

// σ² are the eigenvalues of the Gram matrix of the smaller side, accumulated in f64. An f64 matrix
// is one syrk where it lies; an f32 one is widened kSlab rows (or columns) at a time, never as a whole
// f64 copy (an embedding matrix is gigabytes).
constexpr std::int64_t kSlab = 2048;

template <typename T>
std::vector<double> gram_values(const Matrix<T>& w) {
    require_finite(std::span<const T>(w.data), "the Gram route");  // the callers count NaN/Inf first
    const std::int64_t m = w.rows, n = w.cols;
    const int k = lapack::checked_int(std::min(m, n), "dimension");
    lapack::checked_int(std::max(m, n), "dimension");
    const bool wide = m < n;
    if constexpr (std::is_same_v<T, double>) {
        // Row-major W is column-major Wᵀ (n × m, ld n): WᵀW = (Wᵀ)(Wᵀ)ᵀ is syrk 'N', W Wᵀ = (Wᵀ)ᵀ(Wᵀ)
        // syrk 'T'.
        return cpu::gram_eigenvalues(wide, k, static_cast<int>(std::max(m, n)), w.data.data(),
                                     static_cast<int>(n));
    } else {
        PooledVector<double> g(static_cast<std::size_t>(k) * k), slab;
        const double one = 1.0;
        for (std::int64_t start = 0; start < std::max(m, n); start += kSlab) {
            const int len = static_cast<int>(std::min(kSlab, std::max(m, n) - start));
            const double beta = start == 0 ? 0.0 : 1.0;
            if (!wide) {
                // Rows [start, start+len) of W, contiguous: the k × len matrix W_sᵀ; WᵀW = Σ W_sᵀ W_s.
                slab.assign(w.data.begin() + start * n, w.data.begin() + (start + len) * n);
                dsyrk_("L", "N", &k, &len, &one, slab.data(), &k, &beta, g.data(), &k);
            } else {
                // Columns [start, start+len) of W: each row's run of len entries is contiguous, so the
                // slab is the column-major len × k matrix B_s (ld len) and W Wᵀ = Σ B_sᵀ B_s: syrk 'T'.
                slab.resize(static_cast<std::size_t>(len) * k);
                for (std::int64_t i = 0; i < m; ++i)
                    std::copy_n(w.data.begin() + i * n + start, len, slab.begin() + i * len);
                dsyrk_("L", "T", &k, &len, &one, slab.data(), &len, &beta, g.data(), &k);
            }
        }
        return symmetric_eigen(g, k, false);  // ascending
    }
}

std::optional<std::vector<double>> gram_values_f32(const Matrix<float>& w) {
    require_finite(std::span<const float>(w.data), "the Gram route");  // the callers count NaN/Inf first
    const int m = lapack::checked_int(w.rows, "dimension"), n = lapack::checked_int(w.cols, "dimension");
    // Column-major, row-major W is the n × m matrix Wᵀ (ld n): WᵀW = (Wᵀ)(Wᵀ)ᵀ is syrk 'N' (n ≤ m);
    // W Wᵀ = (Wᵀ)ᵀ(Wᵀ) is syrk 'T' (m < n). No copy either way.
    return n <= m ? cpu::guarded_f32_gram_values(false, n, m, w.data.data(), n)
                  : cpu::guarded_f32_gram_values(true, m, n, w.data.data(), n);
}

// The null's spectrum in f32 throughout: ssyrk, then ssyevd (two-stage from kTwoStageMinOrder, as in
// f64). Measured on a Gaussian 11008 × 4096 block: 2.0× faster than dsyrk + dsyevd_2stage, σ within
// 2e-5 relative (docs/performance.md). nullopt (the caller's f64 route) when the f32 product
// overflows, LAPACK fails or λ_min/λ_max < kNullF32Guard.
std::optional<std::vector<double>> f32_null_values(const Matrix<float>& w) {
    const int m = lapack::checked_int(w.rows, "dimension"), n = lapack::checked_int(w.cols, "dimension");
    const int order = std::min(m, n), depth = std::max(m, n);
    // As gram_values_f32: row-major W is Wᵀ (ld n) to LAPACK; WᵀW is syrk 'N', W Wᵀ syrk 'T'.
    auto product = f32_gram_product(m < n, order, depth, w.data.data(), n);
    if (!product) return std::nullopt;
    auto& g = *product;
    const auto driver = order >= kTwoStageMinOrder ? ssyevd_2stage_ : ssyevd_;
    std::vector<float> lambda(static_cast<std::size_t>(order));
    int info = 0, lwork = -1, liwork = -1, iquery = 0;
    float query = 0;
    driver("N", "L", &order, g.data(), &order, lambda.data(), &query, &lwork, &iquery, &liwork, &info);
    lwork = static_cast<int>(query) + 1;
    liwork = iquery + 1;
    std::vector<float> work(static_cast<std::size_t>(lwork));
    std::vector<int> iwork(static_cast<std::size_t>(liwork));
    driver("N", "L", &order, g.data(), &order, lambda.data(), work.data(), &lwork, iwork.data(), &liwork,
           &info);
    if (info != 0 || !(lambda.back() > 0.0f) || lambda.front() < kNullF32Guard * lambda.back())
        return std::nullopt;
    std::vector<double> s(lambda.size());
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::sqrt(static_cast<double>(lambda[i]));
    return s;  // ascending
}

// The values and whether they were computed in the entries' own precision T (gesdd) or in f64 (the Gram
// route, which accumulates and decomposes in f64 whatever T is).
template <typename T>
Spectrum values(const Matrix<T>& w, SvdRoute route) {
    constexpr bool in_f32 = std::is_same_v<T, float>;
    if (w.rows == 0 || w.cols == 0) return {{}, in_f32};
    if (route == SvdRoute::gesdd) return {gesdd(w, false).s, in_f32};
    if constexpr (in_f32) {
        if (auto s = gram_values_f32(w)) return {std::move(*s), true};
    }
    const auto lambda = gram_values(w);
    if (auto s = singular_values_from_gram(lambda, route)) return {std::move(*s), false};
    // Under the guard: the few values there from the triangular factor, else the whole gesdd.
    if (auto s = cpu::refined_small_values(w, lambda)) return {std::move(*s), false};
    return {gesdd(w, false).s, in_f32};
}

class CpuBackend final : public Backend {
public:
    std::vector<double> singular_values(const Matrix<float>& w, SvdRoute r) override {
        return values(w, r).s;
    }
    std::vector<double> singular_values(const Matrix<double>& w, SvdRoute r) override {
        return values(w, r).s;
    }
    Spectrum f32_spectrum(const Matrix<float>& w, SvdRoute r) override { return values(w, r); }
    std::vector<double> null_singular_values(const Matrix<float>& w, SvdRoute r) override {
        if (r != SvdRoute::gesdd && null_in_f32(w.rows, w.cols))
            if (auto s = f32_null_values(w)) return std::move(*s);
        return values(w, r).s;
    }
    std::vector<std::vector<double>> block_singular_values(const TensorInfo& t,
                                                           std::span<const MatrixBlock> blocks, bool f64,
                                                           SvdRoute route) override {
        std::vector<std::vector<double>> out;
        for (auto& s : cpu::block_spectra(*this, t, blocks, f64, route)) out.push_back(std::move(s.s));
        return out;
    }
    std::vector<Spectrum> f32_block_spectra(const TensorInfo& t, std::span<const MatrixBlock> blocks,
                                            SvdRoute route) override {
        return cpu::block_spectra(*this, t, blocks, false, route);
    }
    std::vector<double> symmetric_eigen(std::span<double> a, std::int64_t k, bool vectors) override {
        return linalg::symmetric_eigen(a, k, vectors);
    }
    std::vector<double> gram(std::span<const double> a, bool transpose, std::int64_t n,
                             std::int64_t depth) override {
        return cpu::gram(a, transpose, n, depth);
    }
    std::vector<double> top_symmetric_eigen(std::span<double> a, std::int64_t n, std::int64_t count,
                                            std::vector<double>& vectors) override {
        return cpu::top_symmetric_eigen(a, n, count, vectors);
    }
    std::vector<double> multiply(std::span<const double> a, bool transpose_a, std::span<const double> b,
                                 bool transpose_b, std::int64_t m, std::int64_t n,
                                 std::int64_t inner) override {
        return linalg::multiply(a, transpose_a, b, transpose_b, m, n, inner);
    }
    std::unique_ptr<GramProducts> gram_products(std::int64_t k, bool with_base) override {
        return cpu_gram_products(k, with_base);
    }
    std::unique_ptr<GramProducts> f32_gram_products(std::int64_t k, std::int64_t length,
                                                    bool with_base) override {
        return f32_gram_tried(k, length) ? cpu_f32_gram_products(k, with_base) : nullptr;
    }
    Svd svd(const Matrix<float>& w) override { return gesdd(w, true); }
    Svd svd(const Matrix<double>& w) override { return gesdd(w, true); }
    std::optional<SmallComponents> small_components(const Matrix<double>& w,
                                                    const std::vector<double>& lambda,
                                                    double guard) override {
        return cpu::small_components(w, lambda, guard);
    }
    double measure_matmul_gflops(int n) override {
        std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
        const float one = 1, zero = 0;
        double best = 1e300;
        for (int rep = 0; rep < 3; ++rep) {
            const auto t = std::chrono::steady_clock::now();
            sgemm_("N", "N", &n, &n, &n, &one, a.data(), &n, b.data(), &n, &zero, c.data(), &n);
            best =
                std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
        }
        return 2.0 * n * n * n / best / 1e9;
    }
};

}  // namespace

namespace cpu {

std::optional<std::vector<double>> guarded_f32_gram_values(bool trans, int order, int depth, const float* a,
                                                           int lda) {
    if (!f32_gram_tried(order, depth)) return std::nullopt;
    const auto gf = f32_gram_product(trans, order, depth, a, lda);
    if (!gf) return std::nullopt;
    PooledVector<double> g(gf->begin(), gf->end());
    auto lambda = symmetric_eigen(g, order, false);  // ascending
    if (lambda.empty()) return lambda;
    if (!f32_gram_kept(lambda)) return std::nullopt;
    for (auto& l : lambda) l = std::sqrt(l);
    return lambda;
}

std::vector<double> gram_eigenvalues(bool trans, int order, int depth, const double* a, int lda) {
    PooledVector<double> g(static_cast<std::size_t>(order) * order);
    const double one = 1.0, zero = 0.0;
    dsyrk_("L", trans ? "T" : "N", &order, &depth, &one, a, &lda, &zero, g.data(), &order);
    return symmetric_eigen(g, order, false);  // ascending
}

std::vector<double> gesdd_values(const Matrix<double>& w) { return gesdd(w, false).s; }
Svd gesdd_svd(const Matrix<double>& w) { return gesdd(w, true); }

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

void set_blas_threads(int n) { openblas_set_num_threads(n); }

}  // namespace diffract::linalg
