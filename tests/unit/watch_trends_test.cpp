// watch's trends and alerts on hand-made observations: the least-squares slope of a line, the first
// threshold crossing, a range alert raised when a unit enters the range (not while it stays), jumps
// against the previous checkpoint, and the head-concentration share of the largest tenth.
#include <gtest/gtest.h>

#include <cmath>

#include "diffract/core/step_name.hpp"
#include "diffract/watch/trends.hpp"

using namespace diffract::watch;

namespace {

Observation matrix(std::int64_t step, double alpha, double stable_rank, const char* tensor = "w") {
    Observation o;
    o.source = Source::metrics, o.tensor = tensor, o.layer = 0, o.role = diffract::model::Role::attn_q,
    o.step = step;
    o.values = {{"pl_alpha", alpha}, {"stable_rank", stable_rank}};
    return o;
}

Observation head(std::int64_t step, int h, double update) {
    Observation o;
    o.source = Source::heads, o.layer = 0, o.head = h, o.step = step;
    o.values = {{"update_norm", update}};
    return o;
}

const Trend& find(const std::vector<Trend>& ts, const std::string& field) {
    for (const auto& t : ts)
        if (t.field == field) return t;
    throw std::runtime_error("no trend of " + field);
}

}  // namespace

TEST(WatchTrends, SlopeFirstLastAndCrossing) {
    // pl_alpha = 3 - 0.01 * step at steps 0, 100, 200, 300: slope -0.01, crosses 2 at step 200 (1.0 < 2).
    std::vector<Observation> obs;
    for (int s : {300, 0, 200, 100}) obs.push_back(matrix(s, 3 - 0.01 * s, 10 + s));
    const auto ts = trends(obs, {});
    const auto& a = find(ts, "pl_alpha");
    EXPECT_EQ(a.checkpoints, 4u);
    EXPECT_EQ(a.first_step, 0);
    EXPECT_EQ(a.last_step, 300);
    EXPECT_DOUBLE_EQ(a.first, 3);
    EXPECT_NEAR(a.last, 0, 1e-15);
    EXPECT_NEAR(a.slope, -0.01, 1e-15);
    EXPECT_NEAR(a.change, -3, 1e-15);
    ASSERT_TRUE(a.crossed_step);
    EXPECT_EQ(*a.crossed_step, 200);
    EXPECT_DOUBLE_EQ(*a.threshold, 2);
    const auto& s = find(ts, "stable_rank");
    EXPECT_NEAR(s.slope, 1, 1e-13);
    EXPECT_FALSE(s.crossed_step);  // no thresholds for stable_rank
    EXPECT_DOUBLE_EQ(s.min, 10);
    EXPECT_DOUBLE_EQ(s.max, 310);
}

TEST(WatchTrends, OneCheckpointHasNoSlopeAndNaNsAreLeftOut) {
    std::vector<Observation> obs{matrix(5, 4, 10), matrix(6, NAN, 12)};
    const auto ts = trends(obs, {});
    const auto& a = find(ts, "pl_alpha");
    EXPECT_EQ(a.checkpoints, 1u);
    EXPECT_TRUE(std::isnan(a.slope));
}

TEST(WatchAlerts, RangesAreRaisedOnEntryJumpsAgainstThePreviousCheckpoint) {
    // alpha 4 -> 1.5 (enters over-fit, jump 2.5) -> 1.8 (stays: no alert) -> 7 (under-trained, jump)
    // stable rank 10 -> 10.5 (5 %) -> 13 (24 % > 20 %) -> 13.
    std::vector<Observation> obs{matrix(0, 4, 10), matrix(1, 1.5, 10.5), matrix(2, 1.8, 13),
                                 matrix(3, 7, 13)};
    const auto as = alerts(obs, {});
    std::vector<std::pair<std::int64_t, std::string>> got;
    for (const auto& a : as) got.emplace_back(a.step, std::string(alert_kind_name(a.kind)));
    const std::vector<std::pair<std::int64_t, std::string>> want{
        {1, "over_fit"}, {1, "alpha_jump"}, {2, "stable_rank_jump"}, {3, "under_trained"}, {3, "alpha_jump"}};
    EXPECT_EQ(got, want);
    EXPECT_DOUBLE_EQ(as[1].previous, 4);
    EXPECT_DOUBLE_EQ(as[1].value, 1.5);
    // Thresholds are options.
    AlertThresholds loose;
    loose.alpha_low = 1, loose.alpha_high = 8, loose.alpha_jump = 10, loose.stable_rank_jump = 1;
    EXPECT_TRUE(alerts(obs, loose).empty());
}

TEST(WatchAlerts, HeadConcentrationIsTheLargestTenthsShare) {
    // 20 heads: the largest two (a tenth) hold 2·9 / (2·9 + 18·1) = 50 % at step 1 (not above 0.5),
    // 2·16 / (32 + 18) = 64 % at step 2 (alert), still at step 3 (no second alert).
    std::vector<Observation> obs;
    for (int step = 1; step <= 3; ++step)
        for (int h = 0; h < 20; ++h) obs.push_back(head(step, h, h < 2 ? (step == 1 ? 3.0 : 4.0) : 1.0));
    const auto as = alerts(obs, {});
    ASSERT_EQ(as.size(), 1u);
    EXPECT_EQ(as[0].kind, AlertKind::head_concentration);
    EXPECT_EQ(as[0].step, 2);
    EXPECT_NEAR(as[0].value, 32.0 / 50.0, 1e-15);
}

TEST(StepName, StepsOfCheckpointNames) {
    EXPECT_EQ(diffract::parse_step("checkpoint-500")->value, 500);
    EXPECT_EQ(diffract::parse_step("global_step300")->value, 300);
    EXPECT_EQ(diffract::parse_step("iter_0001000")->value, 1000);
    EXPECT_EQ(diffract::parse_step("model-step20")->unit, "step");
    EXPECT_FALSE(diffract::parse_step("final"));
}
