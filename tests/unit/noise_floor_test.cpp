// The noise floor's two tests against hand-made relative updates: a tight uniform set (an int8 copy of
// a trained decoder) whose largest is a statistical outlier of no practical size stands out nowhere; a
// spread outlier at 1.3x the median does; a head at 2x the median does whatever the spread.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

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

namespace {

// One model's Q blocks of one layer with GQA (4 query heads, 2 kv heads): head h's update is
// norms[h] against a base block of norm 1, agreement 0.9, pl_ks 0.1.
ModelHeadBlocks q_blocks(const std::string& model, const std::vector<double>& norms) {
    ModelHeadBlocks m{model, {}};
    for (int h = 0; h < static_cast<int>(norms.size()); ++h)
        m.blocks.push_back({0, diffract::model::Role::attn_q, h, norms[h], 0.9, 0.9, 0.1, norms[h]});
    return m;
}

}  // namespace

// compare's head table: the reference is ranked against and never ranked itself, rows come model by
// model, the GQA columns come from the geometry, and a model whose heads all moved alike gets a finding
// (its ranking orders noise) where one with a standing-out head gets none.
TEST(NoiseFloor, TheHeadTableRanksEveryModelButTheReference) {
    const diffract::model::HeadGeometry g{4, 2, 8, 32};
    const std::vector<ModelHeadBlocks> models{q_blocks("planted", {0.01, 0.01, 0.2, 0.01}),
                                              q_blocks("uniform", {0.05, 0.0501, 0.0499, 0.05}),
                                              q_blocks("ref", {0.02, 0.02, 0.02, 0.02})};
    std::vector<std::string> findings;
    const auto rows = rank_model_heads(models, 2, g, HeadRankOptions{}, findings);
    ASSERT_EQ(rows.size(), 8u);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(rows[i].model, i < 4 ? "planted" : "uniform");
        EXPECT_EQ(rows[i].reference, "ref");
        EXPECT_EQ(rows[i].head, static_cast<int>(i % 4));
        EXPECT_EQ(rows[i].kv_head, rows[i].head / 2);
        EXPECT_EQ(rows[i].kv_group_size, 2);
        EXPECT_DOUBLE_EQ(rows[i].ref.block_norm[0], 0.02);
    }
    EXPECT_TRUE(rows[2].stands_out);
    EXPECT_FALSE(rows[0].stands_out);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].rfind("uniform: no head's update stands out", 0), 0u) << findings[0];

    // Without a reference every model is ranked and its reference columns are empty.
    findings.clear();
    const auto alone = rank_model_heads(models, -1, g, HeadRankOptions{}, findings);
    EXPECT_EQ(alone.size(), 12u);
    EXPECT_EQ(alone.back().model, "ref");
    EXPECT_EQ(alone.back().reference, "");
    EXPECT_TRUE(std::isnan(alone.front().ref.block_norm[0]));
}
