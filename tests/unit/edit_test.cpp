// The edit library on small synthetic families: grids, truncation rules, merge arithmetic, GQA rewind
// policy, and failures leaving nothing behind.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "diffract/core/error.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/edit/edit_jobs.hpp"
#include "diffract/sweep/sweep.hpp"
#include "diffract/synth/synthetic_family.hpp"

namespace fs = std::filesystem;
using namespace diffract;

namespace {

struct TempDir {
    fs::path path = fs::temp_directory_path() /
                    ("diffract_edit_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                     "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    TempDir() { fs::remove_all(path), fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

fs::path family(const fs::path& dir, int kv_heads = 0, int hidden = 64, DType dtype = DType::F32) {
    synth::FamilyOptions o;
    o.layers = 2, o.hidden = hidden, o.heads = 4, o.kv_heads = kv_heads, o.intermediate = 128, o.vocab = 64;
    o.domain_heads_per_layer = 1, o.generic_heads_per_layer = 1, o.spikes = 1, o.dtype = dtype;
    synth::generate_family(dir.string(), o);
    return dir;
}

std::vector<double> values(const formats::Checkpoint& ck, const std::string& name) {
    const auto* t = ck.find(name);
    EXPECT_NE(t, nullptr) << name;
    return edit::decode(*t);
}

const char* kQ = "model.layers.0.self_attn.q_proj.weight";
const char* kK = "model.layers.0.self_attn.k_proj.weight";

}  // namespace

TEST(EditGrid, ParsesRangesAndLists) {
    EXPECT_EQ(edit::parse_grid("0:1:0.25", "--g"), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
    const auto g = edit::parse_grid("0:1:0.1", "--g");
    ASSERT_EQ(g.size(), 11u);
    EXPECT_EQ(g[3], 0.3);
    EXPECT_EQ(g.back(), 1.0);
    EXPECT_EQ(edit::parse_grid("0.5,1", "--g"), (std::vector<double>{0.5, 1}));
    EXPECT_THROW(edit::parse_grid("0:1", "--g"), InputError);
    EXPECT_THROW(edit::parse_grid("a,b", "--g"), InputError);
    EXPECT_THROW(edit::parse_grid("1:0:0.1", "--g"), InputError);
}

TEST(EditTruncateRule, KeepRankEnergy) {
    const std::vector<double> s{1, 2, 3, 4};  // ascending; squares 1, 4, 9, 16 (total 30)
    using K = edit::TruncateRule::Kind;
    EXPECT_EQ((edit::TruncateRule{K::keep, 0.5}.k_for(s)), 2);
    EXPECT_EQ((edit::TruncateRule{K::keep, 0.3}.k_for(s)), 2);  // ceil(1.2)
    EXPECT_EQ((edit::TruncateRule{K::keep, 0.0}.k_for(s)), 0);
    EXPECT_EQ((edit::TruncateRule{K::rank, 9}.k_for(s)), 4);
    EXPECT_EQ((edit::TruncateRule{K::energy, 16.0 / 30}.k_for(s)), 1);
    EXPECT_EQ((edit::TruncateRule{K::energy, 0.6}.k_for(s)), 2);
    EXPECT_EQ((edit::TruncateRule{K::energy, 1.0}.k_for(s)), 4);
}

TEST(EditSweep, ParsesScoresAndAreas) {
    EXPECT_DOUBLE_EQ(sweep::parse_score("step 1\nacc 0.5 (n=10)\nfinal: -1.25e-1\n", "", "--eval"), -0.125);
    EXPECT_DOUBLE_EQ(sweep::parse_score("log\n{\"acc\": {\"gsm8k\": 0.75}}\n", "acc.gsm8k", "--eval"), 0.75);
    EXPECT_THROW(sweep::parse_score("no numbers", "", "--eval"), InputError);
    // Beyond a double's range: the nearest double (evaluate refuses an infinite score), never std::stod's
    // out_of_range.
    EXPECT_TRUE(std::isinf(sweep::parse_score("result: 1e999", "", "--eval")));
    EXPECT_EQ(sweep::parse_score("loss 1e-400", "", "--eval"), 0.0);
    EXPECT_THROW(sweep::parse_score("{\"a\": 1}", "b", "--eval"), InputError);
    // The documented rule (docs/evaluators.md, "The score"): a marked line wins; else the last non-blank
    // line, a JSON object's last member or a line holding exactly one number; anything else is refused.
    EXPECT_DOUBLE_EQ(sweep::parse_score("diffract-score: 2.5\nloss 7 after 3 steps\n", "", "--eval"), 2.5);
    EXPECT_DOUBLE_EQ(sweep::parse_score("x\n{\"loss\": 3, \"ppl\": 20.5}\n\n", "", "--eval"), 20.5);
    EXPECT_THROW(sweep::parse_score("{\"ppl\": 20.5, \"task\": \"t\"}", "", "--eval"), InputError);
    EXPECT_THROW(sweep::parse_score("loss nan after 3 steps", "", "--eval"), InputError);
    EXPECT_THROW(sweep::parse_score("epoch 3 loss 2.5", "", "--eval"), InputError);
    EXPECT_THROW(sweep::parse_score("diffract-score: 2.5 or 3", "", "--eval"), InputError);
    EXPECT_THROW(sweep::parse_score("", "", "--eval"), InputError);
    EXPECT_TRUE(std::isnan(sweep::parse_score("diffract-score: nan", "", "--eval")));
    EXPECT_TRUE(std::isinf(sweep::parse_score("loss: -inf", "", "--eval")));
    EXPECT_DOUBLE_EQ(sweep::parse_score("model v2 scored 0.75", "", "--eval"), 0.75);
    EXPECT_TRUE(std::isinf(sweep::parse_score(std::string(30000, '9'), "", "--eval")));
    EXPECT_DOUBLE_EQ(sweep::trapezoid_auc({{1, 1}, {0, 0}, {0.5, 1}}), 0.25 + 0.5);
}

TEST(EditMerge, TaskArithmeticAndTies) {
    TempDir tmp;
    const auto fam = family(tmp.path / "fam");
    const auto base = formats::open_checkpoint((fam / "pretrained").string());
    const auto a = formats::open_checkpoint((fam / "math").string());
    const auto b = formats::open_checkpoint((fam / "code").string());
    edit::MergeOptions o;
    o.weights = {0.5, 0.25};
    edit::merge((tmp.path / "ta").string(), base, {&a, &b}, o, {});
    const auto ta = formats::open_checkpoint((tmp.path / "ta").string());
    const auto w0 = values(base, kQ), wa = values(a, kQ), wb = values(b, kQ), m = values(ta, kQ);
    for (std::size_t i = 0; i < w0.size(); ++i) {
        const double expect = w0[i] + 0.5 * (wa[i] - w0[i]) + 0.25 * (wb[i] - w0[i]);
        ASSERT_NEAR(m[i], expect, 1e-6 * (1 + std::abs(expect)));
    }
    // TIES with density 1: sign election, then the mean of the agreeing weighted deltas.
    o.method = edit::MergeMethod::ties;
    edit::merge((tmp.path / "ties").string(), base, {&a, &b}, o, {});
    const auto t = values(formats::open_checkpoint((tmp.path / "ties").string()), kQ);
    for (std::size_t i = 0; i < w0.size(); ++i) {
        const double da = 0.5 * (wa[i] - w0[i]), db = 0.25 * (wb[i] - w0[i]);
        const double sgn = da + db >= 0 ? 1 : -1;
        double mixed = 0, div = 0;
        if (da * sgn > 0) mixed += da, div += 0.5;
        if (db * sgn > 0) mixed += db, div += 0.25;
        const double expect = w0[i] + (div > 0 ? mixed / div : mixed);
        ASSERT_NEAR(t[i], expect, 1e-6 * (1 + std::abs(expect)));
    }
}

TEST(EditRewind, GqaKvPolicy) {
    TempDir tmp;
    const auto fam = family(tmp.path / "fam", /*kv_heads=*/2);
    const auto base = formats::open_checkpoint((fam / "pretrained").string());
    const auto cpt = formats::open_checkpoint((fam / "math").string());
    const int d = cpt.schema.heads->head_dim, cols = static_cast<int>(cpt.find(kK)->shape[1]);
    edit::RewindHead h0{0, 0, {}};  // query head 0: kv head 0 is shared with query head 1
    for (auto policy : {edit::KvPolicy::all, edit::KvPolicy::any}) {
        const auto out = tmp.path / (policy == edit::KvPolicy::all ? "all" : "any");
        edit::rewind(out.string(), base, cpt, {h0}, policy, {});
        const auto ck = formats::open_checkpoint(out.string());
        EXPECT_TRUE(fs::exists(out / "rewound_heads.csv"));
        const auto k = values(ck, kK), kb = values(base, kK), kc = values(cpt, kK);
        const auto q = values(ck, kQ), qb = values(base, kQ), qc = values(cpt, kQ);
        for (int r = 0; r < 2 * d; ++r)
            for (int c = 0; c < cols; ++c) {
                const auto i = static_cast<std::size_t>(r * cols + c);
                // Query rows: head 0 rewound, head 1 not.
                ASSERT_EQ(q[i], r < d ? qb[i] : qc[i]);
                // Key rows of kv head 0 (rows 0..d): rewound only under `any`.
                if (r < d)
                    ASSERT_EQ(k[i], policy == edit::KvPolicy::any ? kb[i] : kc[i]);
                else
                    ASSERT_EQ(k[i], kc[i]);
            }
    }
    // Both query heads of the group: the K/V block is rewound under `all` too.
    edit::rewind((tmp.path / "both").string(), base, cpt, {h0, {0, 1, {}}}, edit::KvPolicy::all, {});
    const auto k = values(formats::open_checkpoint((tmp.path / "both").string()), kK), kb = values(base, kK);
    for (int i = 0; i < d * cols; ++i)
        ASSERT_EQ(k[static_cast<std::size_t>(i)], kb[static_cast<std::size_t>(i)]);
}

TEST(EditFailure, LeavesNoOutputAndRefusesInputs) {
    TempDir tmp;
    const auto small = family(tmp.path / "small");
    const auto wide = family(tmp.path / "wide", 0, 128);
    const auto a = formats::open_checkpoint((small / "math").string());
    const auto b = formats::open_checkpoint((wide / "math").string());
    EXPECT_THROW(edit::interpolate((tmp.path / "out").string(), a, b, 0.5, {}), InputError);
    EXPECT_FALSE(fs::exists(tmp.path / "out"));
    // Inside an input, or over one.
    EXPECT_THROW(edit::permute((small / "math" / "sub").string(), a, 1, {}), InputError);
    EXPECT_THROW(edit::permute((small / "math").string(), a, 1, {}), InputError);
    // A failure half-way (the producer throws on the second tensor): nothing left behind.
    edit::EditJob job;
    job.primary = &a;
    job.editable = edit::Editable::any_float;
    int calls = 0;
    job.edit = [&](const edit::EditTensor&, std::span<std::byte>) {
        if (++calls == 2) throw InputError("boom");
    };
    EXPECT_THROW(edit::run_edit((tmp.path / "half").string(), job), InputError);
    EXPECT_EQ(calls, 2);
    EXPECT_FALSE(fs::exists(tmp.path / "half"));
    for (const auto& e : fs::directory_iterator(tmp.path))
        EXPECT_EQ(e.path().filename().string().find(".half"), std::string::npos);
}

// The edit jobs: checks that need no input refuse before a model is opened, a job without its inputs
// is a defect, and a grid job writes one checkpoint per omega (the same bytes as the one-omega job).
TEST(EditJobs, CheckFirstThenRunTheFamily) {
    TempDir tmp;
    edit::InterpolateJob both;
    both.omega = 0.5, both.grid = "0:1:0.5";
    EXPECT_THROW(both.check(), InputError);
    EXPECT_THROW(edit::InterpolateJob{}.check(), InputError);  // neither
    edit::TruncateJob rule;
    rule.keep = 0.5, rule.rank = 2;
    EXPECT_THROW(rule.check(), InputError);
    edit::PermuteJob no_model;
    no_model.out = (tmp.path / "p").string();
    EXPECT_THROW(edit::run_job(no_model), std::logic_error);
    EXPECT_FALSE(fs::exists(tmp.path / "p"));

    const auto dir = family(tmp.path / "fam");
    const auto a = formats::open_checkpoint((dir / "pretrained").string());
    const auto b = formats::open_checkpoint((dir / "math").string());
    edit::InterpolateJob grid;
    grid.out = (tmp.path / "grid").string(), grid.a = &a, grid.b = &b, grid.grid = "0:1:0.5";
    const auto g = edit::run_job(grid);
    EXPECT_EQ(g.omegas, (std::vector<double>{0, 0.5, 1}));
    EXPECT_FALSE(g.summary.has_value());
    edit::InterpolateJob one = grid;
    one.out = (tmp.path / "one").string(), one.grid.clear(), one.omega = 0.5;
    const auto o = edit::run_job(one);
    ASSERT_TRUE(o.summary.has_value());
    EXPECT_GT(o.summary->changed, 0u);
    const auto from_grid = formats::open_checkpoint((tmp.path / "grid" / edit::omega_dir(0.5)).string());
    const auto alone = formats::open_checkpoint(one.out);
    EXPECT_EQ(values(from_grid, kQ), values(alone, kQ));
}

// EditJob::touches decides which candidates are rewritten, never whether there is anything to edit: a
// job whose every candidate is left as it is writes an honest copy, and a job with no candidate at all
// (no selected tensor of the editable kind) is refused as without touches.
TEST(EditJobs, TouchesNeverHidesAnEditWithNothingToEdit) {
    TempDir tmp;
    const auto dir = family(tmp.path / "fam");
    const auto base = formats::open_checkpoint((dir / "pretrained").string());
    const auto model = formats::open_checkpoint((dir / "math").string());
    edit::EditJob job;
    job.record = {"test", {}};
    job.primary = &model;
    job.aligned = {&base};
    job.editable = edit::Editable::attention_heads;
    job.edit = [](const edit::EditTensor&, std::span<std::byte>) { FAIL() << "no tensor is touched"; };
    job.touches = [](const edit::EditTensor&) { return false; };
    const auto copy = edit::run_edit((tmp.path / "copy").string(), job);
    EXPECT_EQ(copy.edited, 0u);
    EXPECT_GT(copy.copied, 0u);
    job.common.selection = analysis::make_selection({"mlp_down", "", "", ""});  // no attention tensor
    EXPECT_THROW(edit::run_edit((tmp.path / "none").string(), job), InputError);
    EXPECT_FALSE(fs::exists(tmp.path / "none"));
}
