// The small end of an ill-conditioned spectrum (block_values_impl.hpp: refined_small_values, and with
// vectors small_components, for compare's Gram route). A square
// 4096 × 4096 weight matrix, or the permutation null of one, has λ_min/λ_max ~ 1e-10 and trips the
// Gram route's guard; recomputing it whole with gesdd took 13.3 s against 1.1 s (dsyrk) + 2.5 s
// (eigenvalues) for the Gram route, and 1.5 s more for the triangular factor used here
// (docs/performance.md). Only the few values under the guard need the extra accuracy.
#include <algorithm>
#include <cmath>

#include "block_values_impl.hpp"
#include "diffract/core/random.hpp"
#include "diffract/linalg/gram_pair.hpp"
#include "lapack_impl.hpp"

namespace diffract::linalg::cpu {
namespace {

// At most this many values are refined, and only while they are under a quarter of the spectrum: more
// means a (nearly) rank-deficient matrix, which gesdd handles in one pass.
constexpr std::size_t kMaxRefined = 64;
// Iterations of the subspace iteration before giving up (then gesdd). With a block of 2p + 8 vectors
// the p smallest values converge at a rate (σ_p/σ_{2p+9})² per iteration: a few dozen at most. Also
// at most k / (2b) of them (but 16): an iteration costs ~4k²b flops, so a spectrum that converges
// slowly wastes at most ~2k³ before gesdd (~8k³/3 and more) takes over.
constexpr int kMaxIterations = 200;
// Successive Ritz values that agree to this fraction of σ_max are converged: the Rayleigh-Ritz
// product's own error is ~ε·σ_max (gesdd's), so a tighter test would chase rounding.
constexpr double kRitzTolerance = 4e-14;
// Iterations after the values have converged, when vectors are wanted: each shrinks the vectors' angle
// to the exact subspace by (σ_p / σ_{b+1})² at least, and the values' agreement to 4e-14·σ_max leaves
// them at ~sqrt of that.
constexpr int kVectorIterations = 3;

// Q of the QR factorisation of the column-major k × b block x, in place.
bool orthonormalise(std::vector<double>& x, int k, int b) {
    std::vector<double> tau(static_cast<std::size_t>(b));
    int info = 0, lwork = -1;
    double query = 0;
    dgeqrf_(&k, &b, x.data(), &k, tau.data(), &query, &lwork, &info);
    lwork = std::max(1, static_cast<int>(query));
    std::vector<double> work(static_cast<std::size_t>(lwork));
    dgeqrf_(&k, &b, x.data(), &k, tau.data(), work.data(), &lwork, &info);
    if (info != 0) return false;
    dorgqr_(&k, &b, &b, x.data(), &k, tau.data(), work.data(), &lwork, &info);
    return info == 0;
}

bool all_finite(const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// The upper triangular R (k × k) with RᵀR = the short side's Gram matrix, so σ(R) = σ(W) and R's right
// singular vectors are W's short-side vectors (column-major); nullopt when LAPACK fails.
template <typename T>
std::optional<std::vector<double>> triangular_factor(const Matrix<T>& w, int k, int n_long) {
    const auto rows = w.rows, cols = w.cols;
    // Row-major W is, column-major, A = Wᵀ with ld cols: A is k × long (cols ≤ rows; A = L·Q,
    // AAᵀ = LLᵀ = WᵀW, R = Lᵀ) or long × k (A = Q·R, AᵀA = RᵀR = WWᵀ).
    std::vector<double> a(w.data.begin(), w.data.end());
    const bool lq = cols <= rows;
    const int m = lq ? k : n_long, n = lq ? n_long : k;
    {
        std::vector<double> tau(static_cast<std::size_t>(k));
        int info = 0, lwork = -1;
        double query = 0;
        (lq ? dgelqf_ : dgeqrf_)(&m, &n, a.data(), &m, tau.data(), &query, &lwork, &info);
        lwork = std::max(1, static_cast<int>(query));
        std::vector<double> work(static_cast<std::size_t>(lwork));
        (lq ? dgelqf_ : dgeqrf_)(&m, &n, a.data(), &m, tau.data(), work.data(), &lwork, &info);
        if (info != 0) return std::nullopt;
    }
    std::vector<double> r(static_cast<std::size_t>(k) * k, 0.0);
    for (int j = 0; j < k; ++j)
        for (int i = 0; i <= j; ++i)  // R(i, j), i ≤ j: A's upper triangle, or L(j, i)
            r[static_cast<std::size_t>(i) + static_cast<std::size_t>(j) * k] =
                lq ? a[static_cast<std::size_t>(j) + static_cast<std::size_t>(i) * m]
                   : a[static_cast<std::size_t>(i) + static_cast<std::size_t>(j) * m];
    return r;
}

// The p components of `w` under guard·λ_max (λ: the Gram spectrum, ascending): their
// singular values and, with `vectors`, their short-side singular vectors (column-major k × p), both
// ascending. nullopt where refined_small_values' contract says so.
template <typename T>
std::optional<SmallComponents> small_end(const Matrix<T>& w, const std::vector<double>& lambda, double guard,
                                         bool vectors) {
    const auto rows = w.rows, cols = w.cols;
    const std::int64_t k64 = std::min(rows, cols), long64 = std::max(rows, cols);
    if (lambda.size() != static_cast<std::size_t>(k64) || lambda.empty() || !(lambda.back() > 0))
        return std::nullopt;
    const double threshold = guard * lambda.back();
    const auto p =
        static_cast<std::size_t>(std::lower_bound(lambda.begin(), lambda.end(), threshold) - lambda.begin());
    if (p == 0 || p > kMaxRefined || 4 * p > lambda.size()) return std::nullopt;
    const int k = checked_int(k64, "dimension"), n_long = checked_int(long64, "dimension");
    const int b = static_cast<int>(std::min<std::size_t>(2 * p + 8, lambda.size()));
    if (2 * b > k) return std::nullopt;  // a small matrix: gesdd costs no more

    auto factor = triangular_factor(w, k, n_long);
    if (!factor) return std::nullopt;
    std::vector<double> r = std::move(*factor);

    // Inverse subspace iteration on RᵀR from a seeded Gaussian block (the result does not depend on
    // the start beyond the tolerance; the seed keeps runs reproducible).
    std::vector<double> x(static_cast<std::size_t>(k) * b);
    Rng rng(stream_seed(0x5EED, "refined_small_values"));
    for (auto& v : x) v = rng.normal();
    if (!orthonormalise(x, k, b)) return std::nullopt;
    const double one = 1.0;
    std::vector<double> previous;
    // Vectors converge at the rate values do but to the square root of their accuracy (a Ritz value
    // errs by the square of its vector's angle): a few more iterations after the values agree.
    int extra = vectors ? kVectorIterations : 0;
    const int max_iterations = std::min(kMaxIterations, std::max(16, k / (2 * b))) + extra;
    for (int it = 0; it < max_iterations; ++it) {
        dtrsm_("L", "U", "T", "N", &k, &b, &one, r.data(), &k, x.data(), &k);  // X ← R⁻ᵀ X
        dtrsm_("L", "U", "N", "N", &k, &b, &one, r.data(), &k, x.data(), &k);  // X ← R⁻¹ X
        if (!all_finite(x) || !orthonormalise(x, k, b)) return std::nullopt;
        // Rayleigh-Ritz: σ(R X) for orthonormal X. Column-major k × b R X is, row-major, the b × k
        // (R X)ᵀ, with the same singular values; its left vectors (b × b) are R X's right ones.
        Matrix<double> rx(b, k);
        std::copy(x.begin(), x.end(), rx.data.begin());
        dtrmm_("L", "U", "N", "N", &k, &b, &one, r.data(), &k, rx.data.data(), &k);
        bool converged = !previous.empty();
        auto ritz = gesdd_values(rx);
        for (std::size_t i = 0; converged && i < p; ++i)
            converged = std::abs(ritz[i] - previous[i]) <= kRitzTolerance * std::sqrt(lambda.back());
        previous = std::move(ritz);
        if (!converged) continue;
        if (extra > 0) {  // vectors: iterate on past the values' convergence
            --extra;
            continue;
        }
        SmallComponents out;
        out.s.assign(previous.begin(), previous.begin() + static_cast<std::ptrdiff_t>(p));
        if (vectors) {
            // The Ritz vectors X·Y (Y: R X's right singular vectors, b × b; row-major, so Yᵀ to BLAS),
            // of which the first p columns are the p smallest.
            out.vectors = multiply(x, false, gesdd_svd(rx).u.data, true, k, b, b);
            out.vectors.resize(static_cast<std::size_t>(k) * p);
        }
        return out;
    }
    return std::nullopt;
}

}  // namespace

template <typename T>
std::optional<std::vector<double>> refined_small_values(const Matrix<T>& w,
                                                        const std::vector<double>& lambda) {
    const auto small = small_end(w, lambda, kGramConditionGuard, false);
    if (!small) return std::nullopt;
    const std::size_t p = small->s.size();
    std::vector<double> s(lambda.size());
    for (std::size_t i = 0; i < s.size(); ++i)
        s[i] = i < p ? small->s[i] : std::sqrt(std::max(lambda[i], 0.0));
    std::sort(s.begin(), s.end());
    return s;
}

std::optional<SmallComponents> small_components(const Matrix<double>& w, const std::vector<double>& lambda,
                                                double guard) {
    return small_end(w, lambda, guard, true);
}

template std::optional<std::vector<double>> refined_small_values(const Matrix<float>&,
                                                                 const std::vector<double>&);
template std::optional<std::vector<double>> refined_small_values(const Matrix<double>&,
                                                                 const std::vector<double>&);

}  // namespace diffract::linalg::cpu
