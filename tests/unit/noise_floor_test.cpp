// The noise floor's two tests against hand-made relative updates: a tight uniform set (an int8 copy of
// a trained decoder) whose largest is a statistical outlier of no practical size stands out nowhere; a
// spread outlier at 1.3x the median does; a head at 2x the median does whatever the spread.
#include <gtest/gtest.h>

#include "diffract/analysis/head_ranking.hpp"

using namespace diffract::analysis;

TEST(NoiseFloor, StatisticalOutliersNeedAPracticalSize) {
    // The trained decoder's int8 copy: 0.00509 .. 0.00540, the largest 5 % above the median, z 3.9.
    const std::vector<double> tight{0.005111, 0.005086, 0.005205, 0.005165,
                                    0.005332, 0.005396, 0.005120, 0.005116};
    const auto f = noise_floor(tight);
    EXPECT_GT(f.z[5], kStandsOutZ);
    for (char c : f.stands_out) EXPECT_EQ(c, 0);

    std::vector<double> spread{1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 1.3};
    const auto g = noise_floor(spread);
    EXPECT_GT(g.z[7], kStandsOutZ);
    EXPECT_EQ(g.stands_out[7], 1);  // z above the bound and 1.3x the median
    for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(g.stands_out[i], 0);

    std::vector<double> many{1, 1, 1, 1, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1};  // many changed: MAD inflated
    const auto h = noise_floor(many);
    EXPECT_EQ(h.stands_out[4], 1);  // 3x the median
    EXPECT_EQ(h.stands_out[0], 0);
}
