// Which whole matrices weightwatcher.csv writes: WeightWatcher 0.7.7's default layer limits
// (min_evals 8, max_evals 15000 on the shorter side, max_N 50000 on the longer), at their boundaries
// and in either orientation.
#include <gtest/gtest.h>

#include "diffract/analysis/weightwatcher.hpp"

using diffract::analysis::weightwatcher_analyses;

TEST(WeightWatcherLayers, FollowTheDefaultLimitsAtTheirBoundaries) {
    EXPECT_FALSE(weightwatcher_analyses(7, 64));
    EXPECT_TRUE(weightwatcher_analyses(8, 64));
    EXPECT_TRUE(weightwatcher_analyses(64, 8));
    EXPECT_TRUE(weightwatcher_analyses(15000, 15000));
    EXPECT_FALSE(weightwatcher_analyses(15001, 15001));
    EXPECT_TRUE(weightwatcher_analyses(4096, 50000));
    EXPECT_FALSE(weightwatcher_analyses(50001, 4096));
    EXPECT_FALSE(weightwatcher_analyses(2, 384));  // BERT's token_type_embeddings
}
