// The CPU backend against closed forms and invariants: reconstruction U diag(s) Vᵀ = W,
// orthonormal columns, ascending order, the Gram route (multi-slab) against gesdd.
#include <gtest/gtest.h>

#include <cmath>

#include "diffract/core/random.hpp"
#include "diffract/linalg/backend.hpp"

using namespace diffract;

namespace {

Matrix<double> gaussian(std::int64_t r, std::int64_t c, std::uint64_t seed) {
    Matrix<double> m(r, c);
    Rng rng(seed);
    for (auto& v : m.data) v = rng.normal();
    return m;
}

}  // namespace

TEST(SvdCpu, ReconstructsAndIsOrthonormalAndAscending) {
    auto backend = linalg::make_backend("cpu");
    for (auto [r, c] : {std::pair<std::int64_t, std::int64_t>{40, 25}, {25, 40}, {32, 32}}) {
        const auto w = gaussian(r, c, 1);
        const auto svd = backend->svd(w);
        const auto k = std::min(r, c);
        ASSERT_EQ(static_cast<std::int64_t>(svd.s.size()), k);
        for (std::int64_t i = 1; i < k; ++i) EXPECT_LE(svd.s[i - 1], svd.s[i]);
        double err = 0;
        for (std::int64_t i = 0; i < r; ++i)
            for (std::int64_t j = 0; j < c; ++j) {
                double x = 0;
                for (std::int64_t q = 0; q < k; ++q) x += svd.u(i, q) * svd.s[q] * svd.v(j, q);
                err = std::max(err, std::abs(x - w(i, j)));
            }
        EXPECT_LT(err, 1e-12);  // backward-stable f64 SVD on O(1) entries
        for (std::int64_t a = 0; a < k; ++a)
            for (std::int64_t b = 0; b < k; ++b) {
                double uu = 0, vv = 0;
                for (std::int64_t i = 0; i < r; ++i) uu += svd.u(i, a) * svd.u(i, b);
                for (std::int64_t j = 0; j < c; ++j) vv += svd.v(j, a) * svd.v(j, b);
                EXPECT_NEAR(uu, a == b ? 1.0 : 0.0, 1e-12);
                EXPECT_NEAR(vv, a == b ? 1.0 : 0.0, 1e-12);
            }
    }
}

TEST(SvdCpu, GramRouteMatchesGesddAcrossSlabs) {
    auto backend = linalg::make_backend("cpu");
    // 5000 rows, one syrk; and the transposed shape (syrk 'T' on the same storage).
    for (auto [r, c] : {std::pair<std::int64_t, std::int64_t>{5000, 64}, {64, 5000}}) {
        const auto w = gaussian(r, c, 2);
        Matrix<float> wf(r, c);
        for (std::size_t i = 0; i < w.data.size(); ++i) wf.data[i] = static_cast<float>(w.data[i]);
        const auto ref = backend->singular_values(w, linalg::SvdRoute::gesdd);
        const auto gram = backend->singular_values(w, linalg::SvdRoute::gram);
        const auto gram_f = backend->singular_values(wf, linalg::SvdRoute::gram);
        const auto ref_f = backend->singular_values(Matrix<double>{[&] {
                                                        Matrix<double> d(r, c);
                                                        for (std::size_t i = 0; i < d.data.size(); ++i)
                                                            d.data[i] = wf.data[i];
                                                        return d;
                                                    }()},
                                                    linalg::SvdRoute::gesdd);
        ASSERT_EQ(ref.size(), gram.size());
        for (std::size_t i = 0; i < ref.size(); ++i) {
            EXPECT_NEAR(gram[i] / ref[i], 1.0, 1e-12);
            // f32 data, well conditioned: the f32 Gram product (kF32GramGuard), ~1e-8 measured; the
            // documented --precision f32 contract is 1e-4 (tests/python/test_precision.py).
            EXPECT_NEAR(gram_f[i] / ref_f[i], 1.0, 1e-6);
        }
    }
}

// f32 weights at f64 precision on the Gram route: too square for the f32 product (aspect < 4,
// kF32GramMinAspect), so widened to f64 a 2048-row (or -column) slab at a time, two slabs here.
TEST(SvdCpu, WidenedSlabsOfF32WeightsMatchGesdd) {
    auto backend = linalg::make_backend("cpu");
    for (auto [r, c] : {std::pair<std::int64_t, std::int64_t>{2500, 700}, {700, 2500}}) {
        Matrix<float> wf(r, c);
        Matrix<double> wd(r, c);
        Rng rng(3);
        for (std::size_t i = 0; i < wf.data.size(); ++i)
            wd.data[i] = wf.data[i] = static_cast<float>(rng.normal());
        const auto ref = backend->singular_values(wd, linalg::SvdRoute::gesdd);
        const auto gram = backend->singular_values(wf, linalg::SvdRoute::gram);
        ASSERT_EQ(ref.size(), gram.size());
        for (std::size_t i = 0; i < ref.size(); ++i)
            EXPECT_NEAR(gram[i] / ref[i], 1.0, 1e-12) << r << "x" << c;
    }
}

TEST(SvdCpu, DiagonalMatrixClosedForm) {
    auto backend = linalg::make_backend("cpu");
    Matrix<double> d(4, 3);
    d(0, 0) = 3, d(1, 1) = -1, d(2, 2) = 2;
    for (auto route : {linalg::SvdRoute::gesdd, linalg::SvdRoute::gram, linalg::SvdRoute::auto_route}) {
        const auto s = backend->singular_values(d, route);
        ASSERT_EQ(s.size(), 3u);
        EXPECT_NEAR(s[0], 1, 1e-14);
        EXPECT_NEAR(s[1], 2, 1e-14);
        EXPECT_NEAR(s[2], 3, 1e-14);
    }
}
