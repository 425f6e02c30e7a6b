#include "diffract/analysis/expert_overlap.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>

#include <fmt/format.h>

#include "diffract/core/random.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::analysis {

Subspace top_singular_subspace(const Matrix<double>& w, std::int64_t k, bool right,
                               linalg::Backend& backend) {
    const std::int64_t m = w.rows, n = w.cols;
    Subspace out;
    out.n = right ? n : m;
    out.k = std::clamp<std::int64_t>(k, 0, std::min(m, n));
    if (out.k == 0 || !std::all_of(w.data.begin(), w.data.end(), [](double v) { return std::isfinite(v); }))
        return out;
    // The row-major m × n w is the column-major n × m X = wᵀ: the Gram matrix of the shorter side is
    // wᵀw = X·Xᵀ (n × n) when n ≤ m, else w·wᵀ = Xᵀ·X (m × m).
    const std::span<const double> x(w.data.data(), w.data.size());
    const bool short_is_cols = n <= m;
    const std::int64_t order = short_is_cols ? n : m, other = short_is_cols ? m : n;
    auto gram = backend.gram(x, !short_is_cols, order, other);
    std::vector<double> vectors;
    const auto lambda = backend.top_symmetric_eigen(gram, order, out.k, vectors);
    if (!(lambda.back() > 0) || lambda.front() <= kSubspaceRankGuard * kSubspaceRankGuard * lambda.back())
        return out;
    if (right == short_is_cols) {  // the wanted side is the Gram matrix's
        out.basis = std::move(vectors);
        return out;
    }
    // The other side: u = w·v/σ = Xᵀ·v (m × k), or v = wᵀ·u/σ = X·u (n × k).
    out.basis = backend.multiply(x, short_is_cols, vectors, false, other, out.k, order);
    for (std::int64_t c = 0; c < out.k; ++c) {
        const double sigma = std::sqrt(lambda[static_cast<std::size_t>(c)]);
        for (std::int64_t i = 0; i < other; ++i) out.basis[static_cast<std::size_t>(i + c * other)] /= sigma;
    }
    return out;
}

double SubspaceOverlap::min_angle_degrees() const {
    return std::acos(std::clamp(max_cos, 0.0, 1.0)) * 180.0 / std::numbers::pi;
}

SubspaceOverlap subspace_overlap(const Subspace& a, const Subspace& b, linalg::Backend& backend) {
    SubspaceOverlap out;
    if (!a.defined() || !b.defined() || a.n != b.n || a.k != b.k) return out;
    const auto k = a.k;
    const auto cosines = backend.multiply(a.basis, true, b.basis, false, k, k, a.n);  // AᵀB, k × k
    double sum = 0;
    for (double c : cosines) sum += c * c;
    out.overlap = sum / static_cast<double>(k);
    // σ_max(AᵀB)² is the largest eigenvalue of (AᵀB)ᵀ(AᵀB).
    auto gram = backend.gram(cosines, true, k, k);
    const auto lambda = backend.symmetric_eigen(gram, k, false);
    out.max_cos = std::min(1.0, std::sqrt(std::max(0.0, lambda.back())));
    return out;
}

ChanceFloor chance_floor(std::int64_t n, std::int64_t k, std::uint64_t seed, int draws,
                         linalg::Backend& backend) {
    ChanceFloor f;
    f.n = n, f.k = k;
    if (n <= 0 || k <= 0 || k > n) return f;
    f.mean = static_cast<double>(k) / static_cast<double>(n);
    f.draws = std::max(draws, 0);
    if (f.draws == 0) return f;
    Subspace fixed{n, k, std::vector<double>(static_cast<std::size_t>(n * k), 0.0)};
    for (std::int64_t c = 0; c < k; ++c) fixed.basis[static_cast<std::size_t>(c + c * n)] = 1.0;
    Rng rng(stream_seed(seed, "expert_overlap", fmt::format("{}x{}", n, k)));
    std::vector<double> overlaps;
    Matrix<double> gaussian(n, k);
    for (int d = 0; d < f.draws; ++d) {
        for (auto& v : gaussian.data) v = rng.normal();
        const double o =
            subspace_overlap(fixed, top_singular_subspace(gaussian, k, false, backend), backend).overlap;
        if (!std::isnan(o)) overlaps.push_back(o);  // a Gaussian n × k matrix has rank k almost surely
    }
    if (overlaps.empty()) return f;
    std::sort(overlaps.begin(), overlaps.end());
    const auto rank =
        static_cast<std::size_t>(std::ceil(kChancePercentile * static_cast<double>(overlaps.size())));
    f.p99 = overlaps[std::clamp<std::size_t>(rank, 1, overlaps.size()) - 1];
    return f;
}

}  // namespace diffract::analysis
