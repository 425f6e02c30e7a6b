// The small end of an ill-conditioned spectrum (linalg/cpu/small_values.cpp): planted singular values
// (W = U diag(s) Vᵀ with a few values far under the Gram route's guard) come back within gesdd's
// accuracy, ~ε·σ_max/σ, on both factor paths (LQ for tall, QR for wide); the auto route uses them;
// with vectors (compare's Gram route), the planted short-side vectors come back too; a
// rank-deficient matrix, where most of the spectrum is under the guard, is left to gesdd.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "diffract/linalg/backend.hpp"
#include "linalg/cpu/block_values_impl.hpp"
#include "random_matrix.hpp"

using namespace diffract;

namespace {

// A bulk from 1e-3 to 1 and three values 1e-7, 3e-7, 1e-6: λ/λ_max 1e-14 .. 1e-12, under the 1e-9 guard.
std::vector<double> spectrum(std::int64_t k) {
    std::vector<double> s{1e-7, 3e-7, 1e-6};
    for (std::int64_t i = 0; i + 3 < k; ++i)
        s.push_back(std::pow(10.0, -3.0 + 3.0 * static_cast<double>(i) / static_cast<double>(k - 4)));
    return s;
}

// The Gram spectrum λ = σ² that refined_small_values takes, from the Gram route's σ.
std::vector<double> squared(const std::vector<double>& s) {
    std::vector<double> lambda(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) lambda[i] = s[i] * s[i];
    return lambda;
}

}  // namespace

TEST(SmallValues, PlantedValuesUnderTheGuardComeBackToGesddAccuracy) {
    auto backend = linalg::make_backend("cpu");
    for (const auto& [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{260, 200}, {200, 260}, {200, 200}}) {
        SCOPED_TRACE(rows * 1000 + cols);
        const auto s = spectrum(std::min(rows, cols));
        const auto w = test_data::planted_svd(rows, cols, s, 11).w;
        const auto gesdd = backend->singular_values(w, linalg::SvdRoute::gesdd);
        const auto gram = backend->singular_values(w, linalg::SvdRoute::gram);
        // What makes the refinement necessary: the Gram route alone misses the smallest planted value by
        // far more than the auto route's contract (~1e-7 relative).
        EXPECT_GT(std::abs(gram[0] - s[0]) / s[0], 1e-6);

        const auto refined = linalg::cpu::refined_small_values(w, squared(gram));
        ASSERT_TRUE(refined.has_value());
        const auto autos = backend->singular_values(w, linalg::SvdRoute::auto_route);
        EXPECT_EQ(autos, *refined);  // the auto route takes the refinement, not gesdd
        for (std::size_t i = 0; i < s.size(); ++i) {
            // gesdd's own error on the planted values is ~ε·σ_max/σ = 1e-9 relative at 1e-7.
            const double tolerance = i < 3 ? 1e-8 : 1e-7;
            EXPECT_LT(std::abs((*refined)[i] - s[i]) / s[i], tolerance) << i;
            EXPECT_LT(std::abs(gesdd[i] - s[i]) / s[i], tolerance) << i;  // the reference holds it too
        }
    }
}

TEST(SmallValues, RankDeficientMatricesAreLeftToGesdd) {
    auto backend = linalg::make_backend("cpu");
    const auto w = test_data::rank2_matrix(120, 100, 5);
    const auto gram = backend->singular_values(w, linalg::SvdRoute::gram);
    EXPECT_FALSE(linalg::cpu::refined_small_values(w, squared(gram)).has_value());
    EXPECT_EQ(backend->singular_values(w, linalg::SvdRoute::auto_route),
              backend->singular_values(w, linalg::SvdRoute::gesdd));
}

TEST(SmallValues, PlantedVectorsUnderTheGuardComeBackToGesddAccuracy) {
    auto backend = linalg::make_backend("cpu");
    for (const auto& [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{260, 200}, {200, 260}, {200, 200}}) {
        SCOPED_TRACE(rows * 1000 + cols);
        const auto k = std::min(rows, cols);
        const auto s = spectrum(k);
        const auto planted = test_data::planted_svd(rows, cols, s, 21);
        const auto lambda = squared(backend->singular_values(planted.w, linalg::SvdRoute::gram));
        const auto small = backend->small_components(planted.w, lambda, linalg::kGramConditionGuard);
        ASSERT_TRUE(small.has_value());
        ASSERT_EQ(small->s.size(), 3u);  // the planted values under the guard, and only they
        ASSERT_EQ(small->vectors.size(), static_cast<std::size_t>(k) * 3);
        // The short side's planted vectors: V (right) when the columns are the short side, else U.
        const auto& exact = cols <= rows ? planted.v : planted.u;
        for (std::size_t c = 0; c < 3; ++c) {
            EXPECT_LT(std::abs(small->s[c] - s[c]) / s[c], 1e-8) << c;
            double dot = 0;
            for (std::int64_t i = 0; i < k; ++i)
                dot += small->vectors[static_cast<std::size_t>(i) + c * static_cast<std::size_t>(k)] *
                       exact(i, static_cast<std::int64_t>(c));
            const double sign = dot < 0 ? -1.0 : 1.0;
            double err = 0;  // ‖v − ±v_planted‖: ~ε·σ_max / (gap to the next value) = 5e-10 here
            for (std::int64_t i = 0; i < k; ++i) {
                const double d =
                    small->vectors[static_cast<std::size_t>(i) + c * static_cast<std::size_t>(k)] -
                    sign * exact(i, static_cast<std::int64_t>(c));
                err += d * d;
            }
            EXPECT_LT(std::sqrt(err), 1e-8) << c;
        }
    }
}
