// Non-finite weights (NaN, ±Inf) are reported, never fatal and never propagated: counted in every
// storage dtype; LAPACK never sees them (a failure below names the file and tensor); analyze and
// compare give the affected matrices and head blocks NaN rows with their count and analyse the rest;
// edits refuse them unless allowed, and then carry them through unchanged and edit the rest.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <unistd.h>

#include "diffract/core/error.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/formats/memory_checkpoint.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/analyze.hpp"
#include "diffract/run/compare.hpp"

#include "random_matrix.hpp"
#include "stored_tensor.hpp"

namespace fs = std::filesystem;
using namespace diffract;
using diffract::test_data::random_matrix;
using diffract::test_data::stored_tensor;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const char* kQ = "model.layers.0.self_attn.q_proj.weight";
const char* kK = "model.layers.0.self_attn.k_proj.weight";
const char* kUp = "model.layers.0.mlp.up_proj.weight";

using Poison = std::vector<std::tuple<std::int64_t, std::int64_t, double>>;  // (row, col, value)

// A random r × c tensor (scaled to 0.05, as trained weights) stored in `dtype`, with `bad` entries.
formats::MemoryTensor memory_tensor(const std::string& name, std::int64_t r, std::int64_t c,
                                    std::uint64_t seed, DType dtype, const Poison& bad = {}) {
    auto w = random_matrix(r, c, seed);
    for (auto& v : w.data) v *= 0.05;
    for (const auto& [i, j, v] : bad) w(i, j) = v;
    auto owner = std::make_shared<std::vector<std::byte>>(w.data.size() * dtype_size(dtype));
    if (dtype == DType::F64) {
        std::memcpy(owner->data(), w.data.data(), owner->size());
    } else {
        const std::vector<float> narrow(w.data.begin(), w.data.end());
        convert_from_f32(narrow.data(), dtype, narrow.size(), owner->data());
    }
    formats::MemoryTensor t;
    t.name = name, t.dtype = dtype, t.shape = {r, c};
    t.data = owner->data(), t.nbytes = owner->size(), t.owner = owner;
    return t;
}

const nlohmann::json kConfig = {{"model_type", "llama"},
                                {"hidden_size", 64},
                                {"num_attention_heads", 4},
                                {"num_key_value_heads", 2},
                                {"num_hidden_layers", 1}};

// One llama layer (heads of 16 rows); `seed` varies the values, `poison` places NaN/Inf by tensor.
formats::Checkpoint test_model(const std::string& name, std::uint64_t seed, DType dtype,
                               const std::map<std::string, Poison>& poison = {}) {
    auto bad = [&](const std::string& t) {
        auto it = poison.find(t);
        return it == poison.end() ? Poison{} : it->second;
    };
    return formats::memory_checkpoint(
        name,
        {memory_tensor("model.embed_tokens.weight", 96, 64, seed + 1, dtype),
         memory_tensor(kQ, 64, 64, seed + 2, dtype, bad(kQ)),
         memory_tensor(kK, 32, 64, seed + 3, dtype, bad(kK)),
         memory_tensor("model.layers.0.self_attn.v_proj.weight", 32, 64, seed + 6, dtype),
         memory_tensor("model.layers.0.self_attn.o_proj.weight", 64, 64, seed + 4, dtype),
         memory_tensor(kUp, 160, 64, seed + 5, dtype, bad(kUp))},
        kConfig);
}

struct TempDir {
    fs::path path =
        fs::temp_directory_path() / ("diffract_nonfinite_" + std::to_string(::getpid()) + "_" +
                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    TempDir() { fs::remove_all(path), fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

// ---- Counting -------------------------------------------------------------------------------------

TEST(NonfiniteCount, EveryStorageDtypeWholeAndBlocks) {
    for (auto dtype : {DType::BF16, DType::F16, DType::F32, DType::F64, DType::F8_E4M3, DType::F8_E5M2}) {
        auto w = random_matrix(12, 10, 1);
        w(1, 2) = kNaN;
        // e4m3fn has no infinity (an Inf saturates to 448 when written): a second NaN there.
        w(7, 0) = dtype == DType::F8_E4M3 ? kNaN : -kInf;
        const auto t = stored_tensor(w, dtype);
        for (bool f64 : {false, true}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + (f64 ? " f64" : " f32"));
            EXPECT_EQ(count_nonfinite(t, f64), 2);
            EXPECT_EQ(count_nonfinite(t, {0, 4, 0, 10, false}, f64), 1);  // rows 0..3
            EXPECT_EQ(count_nonfinite(t, {4, 8, 0, 10, false}, f64), 1);  // rows 4..11
            EXPECT_EQ(count_nonfinite(t, {0, 12, 3, 7, false}, f64), 0);  // columns 3..9
            EXPECT_EQ(count_nonfinite(t, {0, 12, 0, 3, true}, f64), 2);   // transposed block
            EXPECT_EQ(count_nonfinite(std::span<const double>(w.data)), 2);
        }
    }
}

TEST(NonfiniteCount, F64BeyondF32RangeCountsAtF32Precision) {
    auto w = random_matrix(4, 4, 2);
    w(0, 0) = 1e300;  // finite in f64, an infinity once read as f32
    const auto t = stored_tensor(w, DType::F64);
    EXPECT_EQ(count_nonfinite(t, true), 0);
    EXPECT_EQ(count_nonfinite(t, false), 1);
}

TEST(NonfiniteCount, GgufQ8ZeroBlockWithNonFiniteScale) {
    // One row of 64 values: two Q8_0 blocks (an f16 scale, then 32 int8). Block 0's scale is +Inf.
    auto bytes = std::make_shared<std::vector<std::byte>>(2 * 34);
    const std::uint16_t inf16 = 0x7C00, one16 = f32_to_f16(1.0f);
    std::memcpy(bytes->data(), &inf16, 2);
    std::memcpy(bytes->data() + 34, &one16, 2);
    for (int i = 0; i < 32; ++i) (*bytes)[2 + i] = (*bytes)[36 + i] = static_cast<std::byte>(i);
    TensorInfo t;
    t.name = "blk.0.ffn_up.weight", t.dtype = DType::Q8_0, t.shape = {1, 64};
    t.file = MappedFile::from_memory("memory:q8", bytes, bytes->data(), bytes->size());
    t.nbytes = bytes->size();
    EXPECT_EQ(count_nonfinite(t, true), 32);  // Inf·q, and Inf·0 = NaN
    EXPECT_EQ(count_nonfinite(t, {0, 1, 32, 32, false}, false), 0);
}

TEST(NonfiniteCount, PairCountsEachSideAndTheirUnion) {
    auto a = random_matrix(6, 5, 3), b = random_matrix(6, 5, 4);
    a(0, 0) = kNaN, a(2, 1) = kInf;
    b(2, 1) = kNaN, b(5, 4) = -kInf;
    const auto ta = stored_tensor(a, DType::BF16), tb = stored_tensor(b, DType::F32);
    const auto n = count_nonfinite_pair(ta, tb, {0, 6, 0, 5, false}, true);
    EXPECT_EQ(n.first, 2);
    EXPECT_EQ(n.second, 2);
    EXPECT_EQ(n.either, 3);
    const auto rows = count_nonfinite_pair(ta, tb, {1, 3, 0, 5, false}, false);
    EXPECT_EQ(rows.first, 1);
    EXPECT_EQ(rows.either, 1);
}

// ---- Backends -------------------------------------------------------------------------------------

TEST(NonfiniteBackend, LapackNeverSeesNaNAndFailuresNameTheTensor) {
    auto backend = linalg::make_backend("cpu");
    auto w = random_matrix(20, 12, 5);
    w(3, 4) = kNaN;
    Matrix<float> wf(w.rows, w.cols);
    std::copy(w.data.begin(), w.data.end(), wf.data.begin());
    // Outside any scope: an internal error (a caller forgot to count), never a LAPACK call.
    EXPECT_THROW(backend->singular_values(w, linalg::SvdRoute::gesdd), std::runtime_error);
    try {
        backend->svd(w);
        FAIL() << "expected an error";
    } catch (const InputError&) {
        FAIL() << "outside a TensorScope the error is internal";
    } catch (const std::runtime_error& e) {
        EXPECT_TRUE(contains(e.what(), "non-finite")) << e.what();
    }
    // Within a scope: InputError naming the file and the tensor, on every route and precision.
    const TensorScope scope("dir/model.safetensors", "layer.weight");
    auto expect_named = [](const std::function<void()>& f) {
        try {
            f();
            ADD_FAILURE() << "expected InputError";
        } catch (const InputError& e) {
            EXPECT_TRUE(contains(e.what(), "dir/model.safetensors: tensor 'layer.weight': ")) << e.what();
        }
    };
    for (auto route : {linalg::SvdRoute::gesdd, linalg::SvdRoute::gram, linalg::SvdRoute::auto_route}) {
        expect_named([&] { backend->singular_values(w, route); });
        expect_named([&] { backend->singular_values(wf, route); });
    }
    expect_named([&] { backend->svd(w); });
    expect_named([&] { backend->svd(wf); });
    // A Gram matrix that overflowed (finite entries, infinite squares) never reaches syevd either.
    std::vector<double> g = {1.0, kInf, kInf, 1.0};
    expect_named([&] { backend->symmetric_eigen(g, 2, false); });
    // Clean data still works in the scope.
    const auto clean = random_matrix(20, 12, 6);
    EXPECT_EQ(backend->singular_values(clean, linalg::SvdRoute::gram).size(), 12u);
}

// ---- analyze --------------------------------------------------------------------------------------

TEST(NonfiniteAnalyze, AffectedMatricesAndHeadsGetNaNRowsTheRestIsAnalysed) {
    TempDir tmp;
    for (auto dtype : {DType::BF16, DType::F16, DType::F32, DType::F8_E5M2}) {
        // q_proj: NaN in head 0 (rows 0..15) and Inf in head 2 (rows 32..47); up_proj: -Inf.
        const formats::Checkpoint m(
            test_model("bad", 10, dtype, {{kQ, {{2, 3, kNaN}, {40, 5, kInf}}}, {kUp, {{150, 63, -kInf}}}}));
        for (bool by_tensor : {false, true})
            for (auto precision : {analysis::Precision::f32, analysis::Precision::f64}) {
                SCOPED_TRACE(std::string(dtype_name(dtype)) + (by_tensor ? " per tensor" : " per matrix") +
                             (precision == analysis::Precision::f32 ? " f32" : " f64"));
                run::AnalyzeOptions o;
                o.models = {m};
                o.metrics = analysis::resolve_metrics("default");
                o.kernel.precision = precision;
                o.run.store_path =
                    (tmp.path / (std::string(dtype_name(dtype)) + (by_tensor ? "t" : "m") +
                                 (precision == analysis::Precision::f32 ? "32" : "64") + ".sqlite"))
                        .string();
                o.run.progress = false;
                o.run.threads = 2;
                o.tensor_tasks = by_tensor;
                auto check = [&](const run::AnalyzeResult& r) {
                    std::size_t bad_rows = 0;
                    for (const auto& row : r.rows) {
                        std::int64_t expected = 0;
                        if (row.tensor == kQ)
                            expected = !row.head ? 2 : (*row.head == 0 || *row.head == 2) ? 1 : 0;
                        if (row.tensor == kUp) expected = 1;
                        EXPECT_EQ(row.nonfinite_count, expected)
                            << row.tensor << " head " << row.head.value_or(-1);
                        bad_rows += expected > 0;
                        for (const auto& [field, v] : row.values) {
                            if (expected > 0) {
                                EXPECT_TRUE(std::isnan(v)) << row.tensor << " " << field;
                            } else if (field == "frob_norm" || field == "l2_norm" || field == "stable_rank" ||
                                       field == "weights_std" || field == "esd_max") {
                                EXPECT_TRUE(std::isfinite(v)) << row.tensor << " " << field;
                            }
                        }
                    }
                    EXPECT_EQ(bad_rows, 4u);  // q whole, q heads 0 and 2, up whole
                    ASSERT_EQ(r.warnings.size(), 2u);
                    EXPECT_EQ(r.warnings[0], std::string("memory:bad: tensor '") + kQ +
                                                 "': 2 non-finite entries (NaN/Inf); its metrics are NaN");
                    EXPECT_EQ(r.warnings[1], std::string("memory:bad: tensor '") + kUp +
                                                 "': 1 non-finite entry (NaN/Inf); its metrics are NaN");
                };
                const auto first = run::analyze(o);
                EXPECT_EQ(first.reused, 0u);
                check(first);
                // The store keeps the NaN rows with their counts: a re-run reuses every one of them.
                const auto again = run::analyze(o);
                EXPECT_EQ(again.computed, 0u);
                EXPECT_EQ(again.reused, first.computed);
                check(again);
            }
    }
}

// ---- compare --------------------------------------------------------------------------------------

TEST(NonfiniteCompare, PairsWithNonFiniteEntriesGetNaNRowsOnEveryRoute) {
    TempDir tmp;
    const formats::Checkpoint base(test_model("base", 20, DType::BF16, {{kK, {{1, 1, kNaN}}}}));
    const formats::Checkpoint cpt(
        test_model("cpt", 30, DType::BF16, {{kK, {{1, 1, kInf}, {20, 7, kNaN}}}, {kUp, {{0, 0, kNaN}}}}));
    const formats::Checkpoint clean(test_model("clean", 40, DType::BF16));
    int run = 0;
    for (auto route : {linalg::SvdRoute::auto_route, linalg::SvdRoute::gram, linalg::SvdRoute::gesdd})
        for (std::int64_t slab : {std::int64_t{0}, std::int64_t{200}}) {  // 200: many slabs on the Gram route
            SCOPED_TRACE(std::to_string(static_cast<int>(route)) + " slab " + std::to_string(slab));
            run::CompareOptions o;
            o.base = base;
            o.models = {cpt, clean};
            o.route = route;
            o.slab_values = slab;
            o.run.store_path = (tmp.path / ("c" + std::to_string(run++) + ".sqlite")).string();
            o.run.progress = false;
            o.run.threads = 2;
            auto check = [&](const run::CompareResult& r) {
                for (const auto& row : r.rows) {
                    std::int64_t expected = 0;
                    if (row.tensor == kK) {
                        // The base's NaN at (1, 1) is kv head 0; the model's Inf shares it, its NaN at
                        // (20, 7) is kv head 1.
                        const bool cpt_row = row.model == "cpt";
                        if (!row.head)
                            expected = cpt_row ? 2 : 1;
                        else
                            expected = *row.head == 0 ? 1 : (cpt_row ? 1 : 0);
                    }
                    if (row.tensor == kUp && row.model == "cpt") expected = 1;
                    EXPECT_EQ(row.nonfinite_count, expected)
                        << row.model << " " << row.tensor << " head " << row.head.value_or(-1);
                    for (const auto& f : analysis::compare_fields()) {
                        const double v = row.values.at(f);
                        if (expected > 0) {
                            EXPECT_TRUE(std::isnan(v)) << row.model << " " << row.tensor << " " << f;
                        } else if (f == "delta_frob_norm" || f == "avg_l_agreement" ||
                                   f == "rel_sval_change") {
                            EXPECT_TRUE(std::isfinite(v)) << row.model << " " << row.tensor << " " << f;
                        }
                    }
                }
                // One line per stored tensor with NaN/Inf: the base's k_proj once (for both models),
                // the model's k_proj and up_proj.
                ASSERT_EQ(r.warnings.size(), 3u);
                std::set<std::string> lines(r.warnings.begin(), r.warnings.end());
                EXPECT_TRUE(lines.count(std::string("memory:base: tensor '") + kK +
                                        "': 1 non-finite entry (NaN/Inf); its metrics are NaN"));
                EXPECT_TRUE(lines.count(std::string("memory:cpt: tensor '") + kK +
                                        "': 2 non-finite entries (NaN/Inf); its metrics are NaN"));
                EXPECT_TRUE(lines.count(std::string("memory:cpt: tensor '") + kUp +
                                        "': 1 non-finite entry (NaN/Inf); its metrics are NaN"));
            };
            const auto first = run::compare(o);
            check(first);
            const auto again = run::compare(o);
            EXPECT_EQ(again.computed, 0u);
            check(again);
        }
}

// ---- edits ----------------------------------------------------------------------------------------

namespace {

// Every edit kind over (base, cpt), writing `out`.
std::map<std::string, std::function<void(const std::string&, const edit::EditCommon&)>> all_edits(
    const formats::Checkpoint& base, const formats::Checkpoint& cpt, const formats::Checkpoint& other) {
    std::map<std::string, std::function<void(const std::string&, const edit::EditCommon&)>> e;
    e["permute"] = [&](const std::string& out, const edit::EditCommon& c) { edit::permute(out, cpt, 1, c); };
    e["truncate"] = [&](const std::string& out, const edit::EditCommon& c) {
        edit::truncate(out, base, cpt, {edit::TruncateRule::Kind::keep, 0.5}, c);
    };
    e["transplant"] = [&](const std::string& out, const edit::EditCommon& c) {
        edit::transplant(out, base, cpt, c);
    };
    e["interpolate"] = [&](const std::string& out, const edit::EditCommon& c) {
        edit::interpolate(out, base, cpt, 0.3, c);
    };
    e["interpolate_endpoint"] = [&](const std::string& out, const edit::EditCommon& c) {
        edit::interpolate(out, base, cpt, 0.0, c);
    };
    e["merge_ties"] = [&](const std::string& out, const edit::EditCommon& c) {
        edit::MergeOptions o;
        o.method = edit::MergeMethod::ties;
        o.density = 0.5;
        edit::merge(out, base, {&cpt, &other}, o, c);
    };
    e["merge_dare"] = [&](const std::string& out, const edit::EditCommon& c) {
        edit::MergeOptions o;
        o.method = edit::MergeMethod::dare_linear;
        o.density = 0.7;
        edit::merge(out, base, {&other, &cpt}, o, c);
    };
    e["rewind"] = [&](const std::string& out, const edit::EditCommon& c) {
        edit::rewind(out, base, cpt, {edit::RewindHead{0, 0, {}}, edit::RewindHead{0, 2, {}}},
                     edit::KvPolicy::any, c);
    };
    return e;
}

// The primary of each edit kind: whose stored values the output keeps at masked positions.
bool primary_is_base(const std::string& kind) {
    return kind.rfind("interpolate", 0) == 0 || kind.rfind("merge", 0) == 0;
}

}  // namespace

TEST(NonfiniteEdit, RefusedUnlessAllowedThenCarriedThroughUnchanged) {
    for (auto dtype : {DType::F32, DType::BF16, DType::F16}) {
        TempDir tmp;
        const auto base = test_model("base", 50, dtype, {{kUp, {{3, 3, kNaN}}}});
        // q_proj: NaN in head 0, Inf in head 2 (per-head edits); k_proj: -Inf (kv head 1).
        const auto cpt =
            test_model("cpt", 60, dtype, {{kQ, {{2, 3, kNaN}, {40, 5, kInf}}}, {kK, {{17, 9, -kInf}}}});
        const auto other = test_model("other", 70, dtype);
        for (const auto& [kind, run] : all_edits(base, cpt, other))
            for (bool per_head : {false, true}) {
                SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + kind + (per_head ? " per head" : ""));
                const auto out = (tmp.path / (kind + (per_head ? "_heads" : ""))).string();
                edit::EditCommon common;
                common.per_head = per_head;
                try {
                    run(out, common);
                    ADD_FAILURE() << "expected InputError";
                } catch (const InputError& e) {
                    const std::string msg = e.what();
                    EXPECT_TRUE(contains(msg, "memory:cpt: tensor '") ||
                                contains(msg, "memory:base: tensor '"))
                        << msg;
                    EXPECT_TRUE(contains(msg, "non-finite")) << msg;
                    EXPECT_TRUE(contains(msg, "--allow-nonfinite")) << msg;
                }
                EXPECT_FALSE(fs::exists(out));

                common.allow_nonfinite = true;
                run(out, common);
                const auto got = formats::open_checkpoint(out);
                const auto& primary = primary_is_base(kind) ? base : cpt;
                std::size_t carried = 0;
                for (const auto& t : got.tensors) {
                    const auto* p = primary.find(t.name);
                    ASSERT_NE(p, nullptr);
                    ASSERT_EQ(t.dtype, p->dtype);
                    const auto v = edit::decode(t), pv = edit::decode(*p),
                               vb = edit::decode(*base.find(t.name)), vc = edit::decode(*cpt.find(t.name));
                    const std::size_t es = dtype_size(t.dtype);
                    for (std::size_t i = 0; i < v.size(); ++i) {
                        const bool any_bad =
                            (kind != "permute" && !std::isfinite(vb[i])) || !std::isfinite(vc[i]);
                        if (!std::isfinite(v[i])) {
                            EXPECT_FALSE(std::isfinite(pv[i]))
                                << t.name << " [" << i << "]: a new non-finite value";
                        }
                        if (any_bad) {
                            // The primary's stored bytes, whatever the edit computed around them.
                            EXPECT_EQ(std::memcmp(t.bytes().data() + i * es, p->bytes().data() + i * es, es),
                                      0)
                                << t.name << " [" << i << "]";
                            ++carried;
                        }
                    }
                }
                if (kind != "interpolate_endpoint") {
                    EXPECT_GT(carried, 0u);
                }
            }
    }
}

TEST(NonfiniteEdit, TheRestIsEditedAsWithoutTheBadEntries) {
    // Permute with NaN in one head block, per head: the other heads' blocks equal the clean model's
    // permuted blocks exactly (the per-head SVDs never see the NaN).
    TempDir tmp;
    const auto bad = test_model("m", 80, DType::F32, {{kQ, {{2, 3, kNaN}}}});
    const auto good = test_model("m", 80, DType::F32);
    edit::EditCommon c;
    c.per_head = true;
    c.allow_nonfinite = true;
    edit::permute((tmp.path / "bad").string(), bad, 7, c);
    c.allow_nonfinite = false;
    edit::permute((tmp.path / "good").string(), good, 7, c);
    const auto a = formats::open_checkpoint((tmp.path / "bad").string()),
               b = formats::open_checkpoint((tmp.path / "good").string());
    const auto va = edit::decode(*a.find(kQ)), vb = edit::decode(*b.find(kQ));
    for (std::size_t i = 16 * 64; i < va.size(); ++i) ASSERT_EQ(va[i], vb[i]) << i;  // heads 1..3
    EXPECT_TRUE(std::isnan(va[2 * 64 + 3]));
    for (std::size_t i = 0; i < 16 * 64; ++i) EXPECT_EQ(std::isfinite(va[i]), i != 2 * 64 + 3) << i;
    const auto ua = edit::decode(*a.find(kUp)), ub = edit::decode(*b.find(kUp));
    EXPECT_EQ(ua, ub);  // untouched by the NaN elsewhere
}

TEST(NonfiniteEdit, ValuesOverflowingTheDtypeAreRefused) {
    TempDir tmp;
    const auto a = test_model("a", 90, DType::F16), b = test_model("b", 91, DType::F16);
    const auto out = (tmp.path / "o").string();
    try {
        edit::interpolate(out, a, b, 1e6, {});  // |w| ~ 1e4 · 0.05 · 1e6 overflows f16's 65504
        FAIL() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_TRUE(contains(e.what(), "memory:a: tensor '")) << e.what();
        EXPECT_TRUE(contains(e.what(), "overflows")) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
    edit::MergeOptions o;
    o.lambda = 1e9;
    EXPECT_THROW(edit::merge(out, a, {&b}, o, {}), InputError);
    EXPECT_FALSE(fs::exists(out));
}

TEST(NonfiniteEdit, NonFiniteParametersAreRefused) {
    TempDir tmp;
    const auto a = test_model("a", 100, DType::F32), b = test_model("b", 101, DType::F32);
    const auto out = (tmp.path / "o").string();
    for (double bad : {kNaN, kInf, -kInf}) {
        EXPECT_THROW(edit::interpolate(out, a, b, bad, {}), InputError);
        edit::MergeOptions o;
        o.lambda = bad;
        EXPECT_THROW(edit::merge(out, a, {&b}, o, {}), InputError);
        o.lambda = 1;
        o.weights = {bad};
        EXPECT_THROW(edit::merge(out, a, {&b}, o, {}), InputError);
        o.weights = {};
        o.method = edit::MergeMethod::ties;
        o.density = bad;
        EXPECT_THROW(edit::merge(out, a, {&b}, o, {}), InputError);
        EXPECT_THROW(edit::truncate(out, a, b, {edit::TruncateRule::Kind::keep, bad}, {}), InputError);
        EXPECT_THROW(edit::truncate(out, a, b, {edit::TruncateRule::Kind::energy, bad}, {}), InputError);
    }
    EXPECT_FALSE(fs::exists(out));
}
