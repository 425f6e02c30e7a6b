// The permutation null in f32 (Backend::null_singular_values, linalg::null_in_f32): on a tall matrix
// its spectrum is within 1e-4 relative of f64 gesdd on the same entries; a square matrix, or a tall one
// whose f32 spectrum falls under the guard, gets exactly what singular_values gives; and the analysis
// hands the backend the same permutation of the same entries as before, at either draw count; an
// entry whose square overflows f32 sends the product to f64, and one beyond f32 keeps the null in f64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "diffract/analysis/catalog.hpp"
#include "diffract/core/random.hpp"
#include "diffract/linalg/backend.hpp"
#include "random_matrix.hpp"

using namespace diffract;

namespace {

Matrix<float> narrowed(const Matrix<double>& w) {
    Matrix<float> f(w.rows, w.cols);
    for (std::size_t i = 0; i < w.data.size(); ++i) f.data[i] = static_cast<float>(w.data[i]);
    return f;
}

Matrix<double> widened(const Matrix<float>& w) {
    Matrix<double> d(w.rows, w.cols);
    for (std::size_t i = 0; i < w.data.size(); ++i) d.data[i] = w.data[i];
    return d;
}

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
    return worst;
}

}  // namespace

TEST(NullF32, TallNullMatchesF64GesddWithinTheContract) {
    auto backend = linalg::make_backend("cpu");
    // 300 × 150 (order 150, ssyevd) and 2048 × 1024 (order 1024, the two-stage driver), both sides.
    for (const auto& [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{300, 150}, {150, 300}, {2048, 1024}}) {
        const auto w = narrowed(test_data::random_matrix(rows, cols, 7));
        ASSERT_TRUE(linalg::null_in_f32(rows, cols));
        const auto f32 = backend->null_singular_values(w, linalg::SvdRoute::auto_route);
        const auto f64 = backend->singular_values(widened(w), linalg::SvdRoute::gesdd);
        SCOPED_TRACE(rows);
        EXPECT_LT(max_relative_difference(f32, f64), 1e-4);
        // Not the f64 computation under another name: f32 rounding shows in the last digits.
        EXPECT_GT(max_relative_difference(f32, f64), 1e-12);
    }
}

TEST(NullF32, SquareOrIllConditionedNullsKeepTheF64Route) {
    auto backend = linalg::make_backend("cpu");
    const auto square = narrowed(test_data::random_matrix(120, 100, 3));
    EXPECT_FALSE(linalg::null_in_f32(120, 100));
    EXPECT_EQ(backend->null_singular_values(square, linalg::SvdRoute::auto_route),
              backend->singular_values(square, linalg::SvdRoute::auto_route));
    // Tall, but one column 1e-3 of the others: λ_min/λ_max ≈ 1e-6 is under kNullF32Guard.
    auto spiked = test_data::random_matrix(400, 100, 4);
    for (std::int64_t i = 0; i < spiked.rows; ++i) spiked(i, 0) *= 1e-3;
    const auto w = narrowed(spiked);
    ASSERT_TRUE(linalg::null_in_f32(400, 100));
    const auto got = backend->null_singular_values(w, linalg::SvdRoute::auto_route);
    EXPECT_EQ(got, backend->singular_values(w, linalg::SvdRoute::auto_route));
    const auto f64 = backend->singular_values(widened(w), linalg::SvdRoute::gesdd);
    EXPECT_LT(std::abs(got.front() - f64.front()) / f64.front(), 1e-6);
}

TEST(NullF32, AnalysisPermutesTheSameEntriesAtEveryDrawCountAndInput) {
    auto backend = linalg::make_backend("cpu");
    const auto fields = analysis::resolve_metrics("default");
    const auto w = widened(narrowed(test_data::random_matrix(240, 60, 9)));  // f32-exact, as bf16/f32 files
    ASSERT_TRUE(linalg::null_in_f32(w.rows, w.cols));
    analysis::KernelConfig cfg;
    // The reference: the documented permutation (one Fisher-Yates with the per-draw seed) of the
    // entries, factorised by f64 gesdd.
    Matrix<double> p = w;
    Rng rng(stream_seed(static_cast<std::uint64_t>(cfg.rand_seed), "weights_rand"));
    for (std::size_t i = p.data.size(); i > 1; --i) std::swap(p.data[i - 1], p.data[rng.below(i)]);
    const auto reference = backend->singular_values(p, linalg::SvdRoute::gesdd);

    const auto callers = analysis::compute_fields(w, fields, cfg, *backend);
    EXPECT_LT(max_relative_difference(callers.vectors.at("weights_rand_svals"), reference), 1e-4);

    int narrowed_reads = 0;
    analysis::MatrixInput<double> owned;
    owned.rows = w.rows, owned.cols = w.cols, owned.entries = w;
    owned.read = [&] { return w; };
    owned.read_f32 = [&] {
        ++narrowed_reads;
        return narrowed(w);
    };
    const auto got = analysis::compute_fields(std::move(owned), fields, cfg, *backend);
    EXPECT_EQ(narrowed_reads, 1);  // the f64 entries were released, the null read narrowed
    EXPECT_EQ(got.vectors.at("weights_rand_svals"), callers.vectors.at("weights_rand_svals"));
    EXPECT_EQ(got.scalars.at("w1_rand_distance"), callers.scalars.at("w1_rand_distance"));

    analysis::MatrixInput<double> without_narrow_reader;  // a caller that gives only `read`
    without_narrow_reader.rows = w.rows, without_narrow_reader.cols = w.cols;
    without_narrow_reader.read = [&] { return w; };
    EXPECT_EQ(analysis::compute_fields(std::move(without_narrow_reader), fields, cfg, *backend)
                  .vectors.at("weights_rand_svals"),
              callers.vectors.at("weights_rand_svals"));

    cfg.null_draws = 3;  // the entries stay for draws 1, 2: copies, draw 0 as before
    const auto three = analysis::compute_fields(w, fields, cfg, *backend);
    EXPECT_EQ(three.vectors.at("weights_rand_svals"), callers.vectors.at("weights_rand_svals"));
    EXPECT_TRUE(std::isfinite(three.scalars.at("w1_rand_distance_null_std")));
}

TEST(NullF32, AHugeFiniteEntryOverflowingTheF32ProductGoesToF64) {
    // 3e30 is a finite f32 (a corrupted weight, say) whose square is not: the f32 products must give way
    // to the f64 route, for the null and for --precision f32's guarded Gram product alike.
    auto backend = linalg::make_backend("cpu");
    auto w = narrowed(test_data::random_matrix(200, 40, 13));
    w(3, 5) = 3e30f;
    const auto reference = backend->singular_values(widened(w), linalg::SvdRoute::gesdd);
    for (const auto& s : {backend->null_singular_values(w, linalg::SvdRoute::auto_route),
                          backend->singular_values(w, linalg::SvdRoute::auto_route)}) {
        ASSERT_EQ(s.size(), reference.size());
        // Under the guard with most of the spectrum (39 of 40 values): the f32 matrix's gesdd, sgesdd.
        EXPECT_NEAR(s.back() / reference.back(), 1.0, 1e-6);
    }
}

TEST(NullF32, AnF64EntryBeyondF32RangeKeepsTheNullInF64) {
    // 1e100 narrows to Inf: the null of such an f64 matrix must stay on the f64 route (copied and
    // owned entries alike), not fail on an Inf the checkpoint never held.
    auto backend = linalg::make_backend("cpu");
    const auto fields = analysis::resolve_metrics("default");
    auto w = test_data::random_matrix(120, 30, 17);
    w(2, 3) = 1e100;
    ASSERT_TRUE(linalg::null_in_f32(w.rows, w.cols));
    analysis::KernelConfig cfg;
    const auto copied = analysis::compute_fields(w, fields, cfg, *backend);
    EXPECT_NEAR(copied.scalars.at("max_weights_rand_sval") / 1e100, 1.0, 1e-12);

    analysis::MatrixInput<double> owned;
    owned.rows = w.rows, owned.cols = w.cols, owned.entries = w;
    owned.read = [&] { return w; };
    owned.read_f32 = [&] { return narrowed(w); };
    const auto got = analysis::compute_fields(std::move(owned), fields, cfg, *backend);
    EXPECT_EQ(got.vectors.at("weights_rand_svals"), copied.vectors.at("weights_rand_svals"));
}
