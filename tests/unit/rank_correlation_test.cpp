// Rank correlations against closed forms: monotone and reversed orders, ties averaged, Kendall's tau-b
// from concordant and discordant pairs counted by hand, and the bootstrap and permutation edges.
#include <gtest/gtest.h>

#include <cmath>

#include "diffract/analysis/rank_correlation.hpp"

using namespace diffract::analysis;

TEST(RankCorrelation, SpearmanOfOrdersAndTies) {
    EXPECT_EQ(average_ranks({3, 1, 2, 2}), (std::vector<double>{4, 1, 2.5, 2.5}));
    EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 20, 30, 1000}), 1.0);
    EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
    // Ranks x: 1 2.5 2.5 4, y: 1 3 2 4 -> Pearson of the ranks = 4.5 / sqrt(4.5 * 5).
    EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 3, 2, 4}), 4.5 / std::sqrt(4.5 * 5.0), 1e-15);
    EXPECT_TRUE(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));  // a constant side
    EXPECT_TRUE(std::isnan(spearman({1}, {2})));
}

TEST(RankCorrelation, KendallTauB) {
    EXPECT_NEAR(kendall_tau_b({1, 2, 3, 4}, {1, 3, 2, 4}), 4.0 / 6.0, 1e-15);  // 5 concordant, 1 discordant
    EXPECT_NEAR(kendall_tau_b({1, 1, 2}, {1, 2, 3}), 2.0 / std::sqrt(2.0 * 3.0),
                1e-15);  // one pair tied in x
    EXPECT_DOUBLE_EQ(kendall_tau_b({1, 2, 3}, {3, 2, 1}), -1.0);
}

TEST(RankCorrelation, BootstrapAndPermutation) {
    const std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8}, y{1, 2, 3, 4, 5, 6, 7, 8};
    const auto ci = bootstrap_interval(x, y, spearman, 500, 7);
    EXPECT_EQ(ci.low, 1.0);  // every resample of a perfectly monotone relation is monotone
    EXPECT_EQ(ci.high, 1.0);
    EXPECT_GT(ci.draws, 450);  // a few resamples draw one pair only: undefined, left out
    // Only the identity permutation reaches rho = 1: p is about 1/8! + 1/(draws + 1).
    EXPECT_LT(permutation_p_value(x, y, spearman, 999, 7), 0.01);
    const std::vector<double> flat{1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_TRUE(std::isnan(permutation_p_value(x, flat, spearman, 10, 7)));
    EXPECT_THROW(spearman({1, 2}, {1}), std::logic_error);
}
