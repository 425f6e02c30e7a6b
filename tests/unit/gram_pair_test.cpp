// The Gram route of compare (gram_pair.hpp, compare.cpp): products accumulated over slabs equal the
// products of the whole matrices, and compare's fields on that route equal the whole-matrix LAPACK
// route (gesdd) on Llama-style and GPT-2 Conv1D (transposed) tensors, tall and wide, across many slabs;
// a unit with a few components under the vector guard keeps the Gram route, its small end refined,
// and still equals gesdd component by component.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include <unistd.h>

#include "diffract/analysis/compare.hpp"
#include "diffract/core/random.hpp"
#include "diffract/formats/memory_checkpoint.hpp"
#include "diffract/linalg/gram_pair.hpp"
#include "diffract/run/compare.hpp"

#include "random_matrix.hpp"
#include "stored_tensor.hpp"

using namespace diffract;
using diffract::test_data::random_matrix;

namespace {

// Column-major (AᵀB)(i, j) for row-major A, B (len × k).
double product_entry(const Matrix<double>& a, const Matrix<double>& b, std::int64_t i, std::int64_t j) {
    double s = 0;
    for (std::int64_t r = 0; r < a.rows; ++r) s += a(r, i) * b(r, j);
    return s;
}

Matrix<double> rows_of(const Matrix<double>& m, std::int64_t start, std::int64_t len) {
    Matrix<double> out(len, m.cols);
    std::copy_n(&m(start, 0), len * m.cols, out.data.data());
    return out;
}

Matrix<double> transpose(const Matrix<double>& m) {
    Matrix<double> t(m.cols, m.rows);
    for (std::int64_t i = 0; i < m.rows; ++i)
        for (std::int64_t j = 0; j < m.cols; ++j) t(j, i) = m(i, j);
    return t;
}

}  // namespace

TEST(GramPair, SlabsSumToTheWholeProductsInBothLayouts) {
    const auto b = random_matrix(53, 7, 1), m = random_matrix(53, 7, 2);
    for (bool short_side_rows : {false, true}) {
        linalg::GramPair pair(7);
        for (std::int64_t start = 0; start < 53; start += 10) {
            const auto len = std::min<std::int64_t>(10, 53 - start);
            auto bs = rows_of(b, start, len), ms = rows_of(m, start, len);
            if (short_side_rows) bs = transpose(bs), ms = transpose(ms);  // stored k × len
            pair.add(bs, ms, short_side_rows);
        }
        double b2 = 0, d2 = 0;
        for (std::size_t i = 0; i < b.data.size(); ++i)
            b2 += b.data[i] * b.data[i], d2 += (m.data[i] - b.data[i]) * (m.data[i] - b.data[i]);
        EXPECT_NEAR(pair.base_sq_norm(), b2, 1e-12 * b2);
        EXPECT_NEAR(pair.delta_sq_norm(), d2, 1e-12 * d2);
        EXPECT_FALSE(pair.identical());
        Matrix<double> d(53, 7);
        for (std::size_t i = 0; i < d.data.size(); ++i) d.data[i] = m.data[i] - b.data[i];
        for (std::int64_t i = 0; i < 7; ++i)
            for (std::int64_t j = 0; j <= i; ++j) {  // lower triangles of the symmetric ones
                const auto at = static_cast<std::size_t>(i + j * 7);
                EXPECT_NEAR(pair.base_gram()[at], product_entry(b, b, i, j), 1e-12 * 53);
                EXPECT_NEAR(pair.model_gram()[at], product_entry(m, m, i, j), 1e-12 * 53);
                EXPECT_NEAR(pair.delta_gram()[at], product_entry(d, d, i, j), 1e-12 * 53);
            }
        for (std::int64_t i = 0; i < 7; ++i)
            for (std::int64_t j = 0; j < 7; ++j)
                EXPECT_NEAR(pair.cross()[static_cast<std::size_t>(i + j * 7)], product_entry(b, m, i, j),
                            1e-12 * 53);
    }
}

// --precision f32: the base's, model's and cross products from f32 slabs agree with the f64 products of
// the same (f32-exact) entries to f32 rounding, the delta's product and the norms are the f64 ones.
TEST(GramPair, F32ProductsAgreeToF32RoundingAndTheDeltaStaysF64) {
    auto to_f32 = [](const Matrix<double>& m) {
        Matrix<float> f(m.rows, m.cols);
        for (std::size_t i = 0; i < m.data.size(); ++i) f.data[i] = static_cast<float>(m.data[i]);
        return f;
    };
    auto widened = [](const Matrix<float>& f) {
        Matrix<double> m(f.rows, f.cols);
        for (std::size_t i = 0; i < f.data.size(); ++i) m.data[i] = f.data[i];
        return m;
    };
    const auto b32 = to_f32(random_matrix(300, 20, 5)), m32 = to_f32(random_matrix(300, 20, 6));
    const auto b = widened(b32), m = widened(m32);  // the f32 entries, exactly
    auto cpu = linalg::make_backend("cpu");
    ASSERT_EQ(cpu->f32_gram_products(20, 60, true), nullptr);  // under kF32GramMinAspect: not tried
    linalg::GramPair f32(20, true, cpu->f32_gram_products(20, 300, true)), f64(20);
    ASSERT_TRUE(f32.f32());
    EXPECT_THROW(f32.add(b, m, false), std::logic_error);  // f64 slabs to f32 products
    EXPECT_THROW(f64.add(b32, m32, false), std::logic_error);
    for (std::int64_t start = 0; start < 300; start += 128) {
        const auto len = std::min<std::int64_t>(128, 300 - start);
        const auto bs = rows_of(b, start, len), ms = rows_of(m, start, len);
        f32.add(to_f32(bs), to_f32(ms), false);
        f64.add(bs, ms, false);
    }
    EXPECT_EQ(f32.base_sq_norm(), f64.base_sq_norm());
    EXPECT_EQ(f32.delta_sq_norm(), f64.delta_sq_norm());
    // An f32 dot product of 300 terms errs by at most ~300 ε32 |x||y| (Cauchy-Schwarz bounds Σ|x_r y_r|).
    const double tolerance = 300 * 6e-8;
    const auto diagonal = [](std::vector<double>& g, std::int64_t i) {
        return g[static_cast<std::size_t>(i * 21)];
    };
    for (std::int64_t i = 0; i < 20; ++i)
        for (std::int64_t j = 0; j < 20; ++j) {
            const auto at = static_cast<std::size_t>(i + j * 20);
            EXPECT_NEAR(f32.cross()[at], f64.cross()[at],
                        tolerance * std::sqrt(diagonal(f64.base_gram(), i) * diagonal(f64.model_gram(), j)));
            if (j > i) continue;
            EXPECT_NEAR(f32.base_gram()[at], f64.base_gram()[at],
                        tolerance * std::sqrt(diagonal(f64.base_gram(), i) * diagonal(f64.base_gram(), j)));
            EXPECT_NEAR(f32.model_gram()[at], f64.model_gram()[at],
                        tolerance * std::sqrt(diagonal(f64.model_gram(), i) * diagonal(f64.model_gram(), j)));
            EXPECT_EQ(f32.delta_gram()[at], f64.delta_gram()[at]);
        }
    // Not f64 products under another name: some entry differs by f32 rounding.
    EXPECT_NE(f32.base_gram(), f64.base_gram());
}

TEST(GramPair, SymmetricEigenOfAKnownMatrix) {
    // [[2, 1], [1, 2]]: eigenvalues 1 and 3, vectors (1, −1)/√2 and (1, 1)/√2.
    std::vector<double> a = {2, 1, 1, 2};
    const auto lambda = linalg::symmetric_eigen(a, 2, true);
    ASSERT_EQ(lambda.size(), 2u);
    EXPECT_NEAR(lambda[0], 1.0, 1e-14);
    EXPECT_NEAR(lambda[1], 3.0, 1e-14);
    EXPECT_NEAR(std::abs(a[2]), std::sqrt(0.5), 1e-14);  // column 1 = (1, 1)/√2
    EXPECT_NEAR(a[2], a[3], 1e-14);
    EXPECT_NEAR(a[0], -a[1], 1e-14);
}

TEST(GramPair, SymmetricEigenValuesOnBothDriversMatchAPlantedSpectrum) {
    // A = H diag(λ) H with the Householder reflector H = I − 2vvᵀ (‖v‖ = 1): eigenvalues exactly λ.
    // λ spans 1e-6 .. 1 (a Gram spectrum's range); orders below and above kTwoStageMinOrder run
    // dsyevd and dsyevd_2stage; both within 1e-13·λ_max of the planted values, and of dsyevd's own
    // answer with vectors.
    for (const std::int64_t k : {linalg::kTwoStageMinOrder - 424, linalg::kTwoStageMinOrder + 76}) {
        const auto n = static_cast<std::size_t>(k);
        std::vector<double> lambda(n), v(n);
        Rng rng(static_cast<std::uint64_t>(k));
        double norm = 0;
        for (std::size_t i = 0; i < n; ++i) {
            lambda[i] = std::pow(10.0, -6.0 * rng.uniform());
            v[i] = rng.normal();
            norm += v[i] * v[i];
        }
        for (auto& x : v) x /= std::sqrt(norm);
        // (H D H)_ij = λ_i δ_ij − 2 v_i v_j (λ_i + λ_j) + 4 v_i v_j (vᵀ D v)
        double vdv = 0;
        for (std::size_t i = 0; i < n; ++i) vdv += lambda[i] * v[i] * v[i];
        std::vector<double> a(n * n);
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t i = 0; i < n; ++i)
                a[i + j * n] = (i == j ? lambda[i] : 0.0) - 2 * v[i] * v[j] * (lambda[i] + lambda[j]) +
                               4 * v[i] * v[j] * vdv;
        auto with_vectors = a;
        const auto values = linalg::symmetric_eigen(a, k, false);
        const auto reference = linalg::symmetric_eigen(with_vectors, k, true);
        std::sort(lambda.begin(), lambda.end());
        ASSERT_EQ(values.size(), n);
        for (std::size_t i = 0; i < n; ++i) {
            EXPECT_NEAR(values[i], lambda[i], 1e-13) << "k " << k << " i " << i;
            EXPECT_NEAR(values[i], reference[i], 1e-13) << "k " << k << " i " << i;
        }
    }
}

namespace {

formats::MemoryTensor tensor_of(const std::string& name, std::int64_t r, std::int64_t c,
                                std::vector<float> data) {
    auto owner = std::make_shared<std::vector<float>>(std::move(data));
    formats::MemoryTensor t;
    t.name = name, t.dtype = DType::F32, t.shape = {r, c};
    t.data = reinterpret_cast<const std::byte*>(owner->data());
    t.nbytes = owner->size() * sizeof(float);
    t.owner = owner;
    return t;
}

// A base of the given tensors and a model = base + 0.05·noise (full-rank updates; well conditioned
// enough for the Gram route's guard on the tall and wide matrices, not necessarily on the square ones).
// `low_rank`: base tensors of rank 2 (W = A·B), which the Gram route's guard must refuse.
std::pair<formats::Checkpoint, formats::Checkpoint> family(
    const std::vector<std::pair<std::string, std::pair<std::int64_t, std::int64_t>>>& shapes,
    const nlohmann::json& config, bool low_rank = false) {
    std::vector<formats::MemoryTensor> base, model;
    std::uint64_t seed = 10;
    for (const auto& [name, shape] : shapes) {
        auto w = random_matrix(shape.first, shape.second, ++seed);
        const auto e = random_matrix(shape.first, shape.second, ++seed);
        if (low_rank) {
            const auto a = random_matrix(shape.first, 2, ++seed), b = random_matrix(2, shape.second, ++seed);
            for (std::int64_t i = 0; i < w.rows; ++i)
                for (std::int64_t j = 0; j < w.cols; ++j) w(i, j) = a(i, 0) * b(0, j) + a(i, 1) * b(1, j);
        }
        std::vector<float> bw(w.data.begin(), w.data.end()), mw(bw.size());
        for (std::size_t i = 0; i < mw.size(); ++i) mw[i] = static_cast<float>(w.data[i] + 0.05 * e.data[i]);
        base.push_back(tensor_of(name, shape.first, shape.second, bw));
        model.push_back(tensor_of(name, shape.first, shape.second, mw));
    }
    return {formats::memory_checkpoint("base", base, config),
            formats::memory_checkpoint("model", model, config)};
}

std::map<std::string, run::CompareRow> rows_by_key(const run::CompareResult& r) {
    std::map<std::string, run::CompareRow> out;
    for (const auto& row : r.rows) out[row.tensor + "/" + (row.head ? std::to_string(*row.head) : "")] = row;
    return out;
}

// Every field of the Gram route (forced, and auto) equals the whole-matrix route. With `low_rank`
// only auto is compared, and it must have fallen back for every unit.
void expect_routes_agree(const formats::Checkpoint& base, const formats::Checkpoint& model,
                         bool low_rank = false) {
    const auto dir =
        std::filesystem::temp_directory_path() / ("diffract_gram_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto run = [&](linalg::SvdRoute route, const std::string& store) {
        run::CompareOptions o;
        o.base = base, o.models = {model};
        o.route = route;
        o.slab_values = 300;  // dozens of slabs per matrix
        o.run.store_path = (dir / store).string();
        o.run.progress = false;
        o.run.threads = 1;
        return run::compare(o);
    };
    const auto lapack_result = run(linalg::SvdRoute::gesdd, "gesdd.sqlite");
    EXPECT_EQ(lapack_result.whole_route, lapack_result.rows.size());
    const auto lapack = rows_by_key(lapack_result);
    for (auto route : {linalg::SvdRoute::gram, linalg::SvdRoute::auto_route}) {
        if (low_rank && route == linalg::SvdRoute::gram) continue;  // null-space vectors are arbitrary
        const auto result = run(route, route == linalg::SvdRoute::gram ? "gram.sqlite" : "auto.sqlite");
        // Forced: nothing falls back. Auto: the tall and wide matrices stay on the Gram route.
        if (route == linalg::SvdRoute::gram)
            EXPECT_EQ(result.whole_route, 0u);
        else
            EXPECT_EQ(result.whole_route, low_rank ? result.rows.size() : 0u);
        const auto gram = rows_by_key(result);
        ASSERT_EQ(gram.size(), lapack.size());
        for (const auto& [key, row] : lapack) {
            const auto& other = gram.at(key);
            for (const auto& [field, v] : row.values) {
                const double w = other.values.at(field);
                // Norms and agreements are O(1)-scaled or compared relatively; 1e-8 is far above the
                // ε64·k/λ-ratio error of the Gram route on these matrices and far below any real change.
                EXPECT_NEAR(w, v, 1e-8 * std::max(1.0, std::abs(v))) << key << " " << field;
            }
        }
    }
    std::filesystem::remove_all(dir);
}

}  // namespace

TEST(CompareGramRoute, MatchesLapackOnLlamaTensors) {
    const nlohmann::json config = {{"model_type", "llama"},
                                   {"hidden_size", 32},
                                   {"num_attention_heads", 4},
                                   {"num_key_value_heads", 4},
                                   {"num_hidden_layers", 1}};
    const auto [b, m] = family({{"model.embed_tokens.weight", {700, 32}},
                                {"model.layers.0.self_attn.q_proj.weight", {32, 32}},
                                {"model.layers.0.mlp.up_proj.weight", {96, 32}},
                                {"model.layers.0.mlp.down_proj.weight", {32, 96}}},
                               config);
    expect_routes_agree(b, m);
}

TEST(CompareGramRoute, MatchesLapackOnGpt2Conv1DTensors) {
    // Conv1D weights are stored [in, out]: the logical matrix is the transpose, so slabs of the long
    // side run along stored columns for c_fc and along stored rows for c_proj.
    const nlohmann::json config = {{"model_type", "gpt2"}, {"n_embd", 32}, {"n_head", 4}, {"n_layer", 1}};
    const auto [b, m] = family({{"transformer.wte.weight", {700, 32}},
                                {"transformer.h.0.attn.c_attn.weight", {32, 96}},
                                {"transformer.h.0.attn.c_proj.weight", {32, 32}},
                                {"transformer.h.0.mlp.c_fc.weight", {32, 128}},
                                {"transformer.h.0.mlp.c_proj.weight", {128, 32}}},
                               config);
    expect_routes_agree(b, m);
}

TEST(CompareGramRoute, AutoFallsBackOnRankDeficientMatrices) {
    // λ_min/λ_max of a rank-2 base is ~1e-16: its Gram vectors are refused and every unit (whole
    // matrices and head blocks) is recomputed on the whole-matrix route, equal to --svd-route gesdd.
    const nlohmann::json config = {{"model_type", "llama"},
                                   {"hidden_size", 32},
                                   {"num_attention_heads", 4},
                                   {"num_key_value_heads", 4},
                                   {"num_hidden_layers", 1}};
    const auto [b, m] = family({{"model.layers.0.self_attn.k_proj.weight", {32, 32}},
                                {"model.layers.0.mlp.up_proj.weight", {96, 32}}},
                               config, /*low_rank=*/true);
    expect_routes_agree(b, m, /*low_rank=*/true);
}

namespace {

// Every field of `a` equals `b`'s: scalars to 1e-8 (relative above 1), the per-component agreement
// vectors to 1e-8, the delta's values to 1e-7·σ_max(Δ) (the Gram route's absolute error on them); the
// same precision (the routes differ).
void expect_fields_agree(const FieldValues& a, const FieldValues& b) {
    for (const auto& [field, v] : b.scalars)
        EXPECT_NEAR(a.scalars.at(field), v, 1e-8 * std::max(1.0, std::abs(v))) << field;
    EXPECT_EQ(a.bookkeeping.precision_bits, b.bookkeeping.precision_bits);
    for (const auto& [field, v] : b.vectors) {
        const auto& w = a.vectors.at(field);
        ASSERT_EQ(w.size(), v.size()) << field;
        const double scale = field == "delta_svals" ? 1e-7 * v.back() : 1e-8;
        for (std::size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(w[i], v[i], scale) << field << "[" << i << "]";
    }
}

}  // namespace

TEST(CompareGramRoute, RefinesAFewComponentsUnderTheGuardInsteadOfFallingBack) {
    // A base with two singular values of 1e-7 and 3e-7 under a bulk from 1e-2 to 1 (λ_min/λ_max ~1e-14,
    // far under the 1e-9 vector guard), stored in f64; models that keep that small end (a rotation of
    // the left side: both factorizations need refining) or lose it (added noise: the base's alone).
    // Tall, wide, square and a transposed (Conv1D-style) block, two models sharing the base's cache.
    auto backend = linalg::make_backend("cpu");
    struct Case {
        std::int64_t rows, cols;
        bool transposed;
    };
    for (const auto& [rows, cols, transposed] :
         {Case{72, 40, false}, Case{40, 72, false}, Case{40, 40, false}, Case{72, 40, true}}) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (transposed ? " transposed" : ""));
        const auto k = std::min(rows, cols);
        std::vector<double> s{1e-7, 3e-7};
        for (std::int64_t i = 0; i + 2 < k; ++i)
            s.push_back(std::pow(10.0, -2.0 + 2.0 * static_cast<double>(i) / static_cast<double>(k - 3)));
        const auto base = test_data::planted_svd(rows, cols, s, 31).w;
        const auto r = test_data::random_matrix(rows, rows, 33), e = test_data::random_matrix(rows, cols, 34);
        Matrix<double> rotated(rows, cols), noisy(rows, cols);  // (I + 0.02 R)·W and W + 0.05 E
        for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t j = 0; j < cols; ++j) {
                double x = base(i, j);
                for (std::int64_t t = 0; t < rows; ++t) x += 0.02 * r(i, t) * base(t, j);
                rotated(i, j) = x, noisy(i, j) = base(i, j) + 0.05 * e(i, j);
            }
        // Stored as the matrix, or as its transpose viewed through a transposed block.
        const auto stored = [&](const Matrix<double>& w) {
            if (!transposed) return test_data::stored_tensor(w, DType::F64);
            Matrix<double> t(w.cols, w.rows);
            for (std::int64_t i = 0; i < w.rows; ++i)
                for (std::int64_t j = 0; j < w.cols; ++j) t(j, i) = w(i, j);
            return test_data::stored_tensor(t, DType::F64);
        };
        const auto base_tensor = stored(base);
        analysis::MatrixUnit unit;
        unit.tensor = &base_tensor;
        unit.block = transposed ? MatrixBlock{0, cols, 0, rows, true} : MatrixBlock{0, rows, 0, cols, false};
        analysis::CompareSettings gram, gesdd;
        gram.slab_values = 300;  // many slabs
        gesdd.route = linalg::SvdRoute::gesdd;
        analysis::BaseFactorization gram_cache, gesdd_cache;
        for (const auto* model : {&noisy, &rotated}) {
            const auto model_tensor = stored(*model);
            const auto fast = analysis::compare_unit<double>(gram, unit, model_tensor, gram_cache, *backend);
            const auto reference =
                analysis::compare_unit<double>(gesdd, unit, model_tensor, gesdd_cache, *backend);
            EXPECT_EQ(fast.bookkeeping.whole_route, false);  // refined, not fallen back
            ASSERT_TRUE(gram_cache.gram.has_value());
            EXPECT_EQ(gram_cache.gram->refined, 2u);
            expect_fields_agree(fast, reference);
        }
    }
}
