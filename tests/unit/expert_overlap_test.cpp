// The expert-overlap kernel (analysis/expert_overlap.hpp) against closed forms: identical subspaces
// overlap 1, orthogonal ones 0, and subspaces at known principal angles θ_i give mean cos² θ_i and
// max cos θ_i, on both sides of tall and wide matrices (both Gram branches); a rank-deficient matrix
// has no subspace; the chance floor's mean is k/n and its draws are seeded; the CPU's dsyevr equals the
// backend's default (every eigenpair, then the top ones), and its dsyrk Gram product the default's.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numbers>

#include "diffract/analysis/expert_overlap.hpp"
#include "diffract/linalg/backend.hpp"

#include "random_matrix.hpp"

using namespace diffract;
using namespace diffract::analysis;

namespace {

// Row-major m × n W = Σ_i σ_i e_i b_iᵀ with b_i = cos θ_i e_i + sin θ_i e_{k+i} (R^n) and σ_i = k + 1 - i:
// its top-k left subspace is span(e_1..e_k) of R^m and its right one span(b_i), whose principal angles
// with span(e_1..e_k) of R^n are the θ_i. `tail` adds σ = 0.1 components (e_{2k+j} on both sides) below.
Matrix<double> planted(std::int64_t m, std::int64_t n, const std::vector<double>& theta, int tail = 0) {
    const auto k = static_cast<std::int64_t>(theta.size());
    Matrix<double> w(m, n);
    for (std::int64_t i = 0; i < k; ++i) {
        const double sigma = static_cast<double>(k + 1 - i);
        w(i, i) = sigma * std::cos(theta[static_cast<std::size_t>(i)]);
        w(i, k + i) = sigma * std::sin(theta[static_cast<std::size_t>(i)]);
    }
    for (std::int64_t j = 0; j < tail; ++j) w(2 * k + j, 2 * k + j) = 0.1;
    return w;
}

Subspace coordinates(std::int64_t n, std::int64_t k, std::int64_t first = 0) {
    Subspace s{n, k, std::vector<double>(static_cast<std::size_t>(n * k), 0.0)};
    for (std::int64_t c = 0; c < k; ++c) s.basis[static_cast<std::size_t>(first + c + c * n)] = 1.0;
    return s;
}

double mean_cos2(const std::vector<double>& theta) {
    double s = 0;
    for (double t : theta) s += std::cos(t) * std::cos(t);
    return s / static_cast<double>(theta.size());
}

}  // namespace

TEST(ExpertOverlap, IdenticalSubspacesOverlapOneAndOrthogonalOnesZero) {
    auto backend = linalg::make_backend(linalg::Device::cpu);
    const auto w = test_data::random_matrix(12, 40, 7);
    Matrix<double> scaled(12, 40);  // rows permuted and scaled: wᵀw times 9, the same right vectors
    for (std::int64_t i = 0; i < 12; ++i)
        for (std::int64_t j = 0; j < 40; ++j) scaled(i, j) = 3.0 * w(11 - i, j);  // rows permuted, scaled
    const auto a = top_singular_subspace(w, 4, true, *backend),
               b = top_singular_subspace(scaled, 4, true, *backend);
    const auto same = subspace_overlap(a, b, *backend);
    EXPECT_NEAR(same.overlap, 1.0, 1e-12);
    EXPECT_NEAR(same.max_cos, 1.0, 1e-12);
    EXPECT_NEAR(same.min_angle_degrees(), 0.0, 1e-5);
    const auto apart = subspace_overlap(coordinates(30, 5), coordinates(30, 5, 5), *backend);
    EXPECT_EQ(apart.overlap, 0.0);
    EXPECT_EQ(apart.max_cos, 0.0);
    EXPECT_NEAR(apart.min_angle_degrees(), 90.0, 1e-12);
}

TEST(ExpertOverlap, KnownPrincipalAnglesOnBothSidesOfTallAndWideMatrices) {
    auto backend = linalg::make_backend(linalg::Device::cpu);
    const std::vector<double> theta{0.1, 0.35, 0.7, 1.2};  // radians
    const std::int64_t k = 4;
    for (const auto& [m, n] : {std::pair<std::int64_t, std::int64_t>{10, 24}, {30, 24}}) {  // wide, tall
        const auto w = planted(m, n, theta, 2);
        const auto right = top_singular_subspace(w, k, true, *backend);
        ASSERT_TRUE(right.defined()) << m << "x" << n;
        EXPECT_EQ(right.n, n);
        const auto o = subspace_overlap(coordinates(n, k), right, *backend);
        EXPECT_NEAR(o.overlap, mean_cos2(theta), 1e-12) << m << "x" << n;
        EXPECT_NEAR(o.max_cos, std::cos(theta[0]), 1e-12) << m << "x" << n;
        EXPECT_NEAR(o.min_angle_degrees(), theta[0] * 180.0 / std::numbers::pi, 1e-9);
        const auto left = top_singular_subspace(w, k, false, *backend);  // span(e_1..e_k) of R^m
        EXPECT_EQ(left.n, m);
        EXPECT_NEAR(subspace_overlap(coordinates(m, k), left, *backend).overlap, 1.0, 1e-12);
        EXPECT_NEAR(subspace_overlap(right, right, *backend).overlap, 1.0, 1e-12);
    }
}

TEST(ExpertOverlap, KIsBoundedByTheShapeAndARankDeficientMatrixHasNoSubspace) {
    auto backend = linalg::make_backend(linalg::Device::cpu);
    const auto small = test_data::random_matrix(3, 20, 1);
    EXPECT_EQ(top_singular_subspace(small, 8, true, *backend).k, 3);
    const auto rank2 = test_data::rank2_matrix(16, 20, 3);
    const auto s = top_singular_subspace(rank2, 4, true, *backend);
    EXPECT_FALSE(s.defined());
    EXPECT_TRUE(std::isnan(subspace_overlap(s, coordinates(20, 4), *backend).overlap));
    auto bad = test_data::random_matrix(6, 10, 4);
    bad(2, 3) = std::nan("");
    EXPECT_FALSE(top_singular_subspace(bad, 2, false, *backend).defined());
    EXPECT_TRUE(std::isnan(subspace_overlap(coordinates(10, 2), coordinates(12, 2), *backend).overlap));
}

TEST(ExpertOverlap, ChanceFloorMeanIsKOverNAndItsDrawsAreSeeded) {
    auto backend = linalg::make_backend(linalg::Device::cpu);
    const auto f = chance_floor(64, 8, 42, 400, *backend);
    EXPECT_DOUBLE_EQ(f.mean, 8.0 / 64.0);
    EXPECT_EQ(f.draws, 400);
    EXPECT_GT(f.p99, f.mean);
    EXPECT_LT(f.p99, 0.5);
    EXPECT_EQ(chance_floor(64, 8, 42, 400, *backend).p99, f.p99);
    EXPECT_NE(chance_floor(64, 8, 43, 400, *backend).p99, f.p99);
    EXPECT_TRUE(std::isnan(chance_floor(4, 8, 42, 10, *backend).mean));  // k > n: no subspace
}

TEST(ExpertOverlap, DsyrkAndDsyevrEqualTheDefaults) {
    auto backend = linalg::make_backend(linalg::Device::cpu);
    const auto x = test_data::random_matrix(30, 12, 9);      // column-major 12 × 30 X
    const auto gram = backend->gram(x.data, false, 12, 30);  // X·Xᵀ, lower triangle
    for (const bool transpose : {false, true}) {             // X·Xᵀ (12 × 12), XᵀX (30 × 30)
        const std::int64_t n = transpose ? 30 : 12, depth = transpose ? 12 : 30;
        const auto mine = backend->gram(x.data, transpose, n, depth);
        const auto plain = backend->linalg::Backend::gram(x.data, transpose, n, depth);
        for (std::int64_t j = 0; j < n; ++j)
            for (std::int64_t i = j; i < n; ++i)
                EXPECT_NEAR(mine[static_cast<std::size_t>(i + j * n)],
                            plain[static_cast<std::size_t>(i + j * n)], 1e-12);
    }
    auto a = gram, b = gram;
    std::vector<double> va, vb;
    const auto la = backend->top_symmetric_eigen(a, 12, 3, va);
    const auto lb = backend->linalg::Backend::top_symmetric_eigen(b, 12, 3, vb);
    ASSERT_EQ(la.size(), 3u);
    ASSERT_EQ(lb.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_NEAR(la[i], lb[i], 1e-10 * lb.back());
        double dot = 0;  // the same vector up to sign
        for (std::size_t r = 0; r < 12; ++r) dot += va[i * 12 + r] * vb[i * 12 + r];
        EXPECT_NEAR(std::abs(dot), 1.0, 1e-10);
    }
}
