// One rule for which scores are better (sweep/score_direction.hpp): validate, the sweeps' picks and the
// report take the direction from --direction, else from a known score key, else none.
#include <gtest/gtest.h>

#include "diffract/core/error.hpp"
#include "diffract/sweep/score_direction.hpp"

namespace diffract::sweep {
namespace {

TEST(ScoreDirection, KnownKeysSayWhichScoresAreBetter) {
    for (const char* lower : {"perplexity", "ppl", "loss", "eval_loss", "metrics.val_nll", "bpb", "error",
                              "word-error", "Perplexity", "test.wer", "NLL"})
        EXPECT_EQ(key_lower_is_better(lower), std::optional<bool>(true)) << lower;
    for (const char* higher : {"accuracy", "acc", "score", "metrics.score", "auc", "f1", "exact_match",
                               "bleu", "rouge", "rougeL", "eval_accuracy", "neg_loss", "negative_perplexity"})
        EXPECT_EQ(key_lower_is_better(higher), std::optional<bool>(false)) << higher;
    // Unknown, or words of both kinds: no guess.
    for (const char* unknown : {"", "value", "reward", "kl", "loss_acc", "lossy", "accumulated", "scores"})
        EXPECT_EQ(key_lower_is_better(unknown), std::nullopt) << unknown;
}

TEST(ScoreDirection, TheOptionWinsAndUnknownIsRequiredWhereItJudges) {
    EXPECT_EQ(score_lower_is_better("lower", "accuracy"), std::optional<bool>(true));
    EXPECT_EQ(score_lower_is_better("higher", "perplexity"), std::optional<bool>(false));
    EXPECT_EQ(score_lower_is_better("", "perplexity"), std::optional<bool>(true));
    EXPECT_EQ(score_lower_is_better("", "reward"), std::nullopt);
    EXPECT_THROW((void)score_lower_is_better("up", "perplexity"), InputError);
    EXPECT_TRUE(required_lower_is_better("", "perplexity", "sweep validate"));
    EXPECT_FALSE(required_lower_is_better("higher", "", "sweep validate"));
    try {
        (void)required_lower_is_better("", "reward", "sweep validate");
        FAIL();
    } catch (const InputError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("--direction"), std::string::npos) << m;
        EXPECT_NE(m.find("'reward'"), std::string::npos) << m;
    }
    EXPECT_THROW((void)required_lower_is_better("", "", "sweep validate"), InputError);
    EXPECT_EQ(direction_name(true), "lower");
    EXPECT_EQ(direction_name(false), "higher");
}

}  // namespace
}  // namespace diffract::sweep
