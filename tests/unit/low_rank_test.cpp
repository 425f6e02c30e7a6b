// Generated files (MappedFile::generated) and low-rank updates read by their factors
// (core/low_rank.hpp), against products formed explicitly.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "diffract/core/low_rank.hpp"
#include "stored_tensor.hpp"

namespace diffract {
namespace {

Matrix<double> random_matrix(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng) {
    std::normal_distribution<double> n;
    Matrix<double> m(rows, cols);
    for (auto& x : m.data) x = n(rng);
    return m;
}

TEST(GeneratedFile, ComputesItsBytesOnceWhenFirstRead) {
    int calls = 0;
    const auto f = MappedFile::generated("memory:gen", 1000, [&](std::span<std::byte> out) {
        ++calls;
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(i % 251);
    });
    EXPECT_TRUE(f->is_generated());
    EXPECT_EQ(f->size(), 1000u);
    EXPECT_EQ(calls, 0);  // nothing is computed before a read
    const auto all = f->bytes();
    EXPECT_EQ(calls, 1);
    ASSERT_EQ(all.size(), 1000u);
    for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<std::byte>(i % 251));
    EXPECT_EQ(f->bytes().data(), all.data());
    EXPECT_EQ(calls, 1);
}

// base + scale·B·A (transposed: base + scale·(B·A)ᵀ) formed explicitly in f64.
Matrix<double> explicit_update(const Matrix<double>& w, const Matrix<double>& a, const Matrix<double>& b,
                               double scale, bool transposed) {
    Matrix<double> out = w;
    for (std::int64_t i = 0; i < b.rows; ++i)
        for (std::int64_t j = 0; j < a.cols; ++j) {
            double s = 0;
            for (std::int64_t k = 0; k < a.rows; ++k) s += b(i, k) * a(k, j);
            (transposed ? out(j, i) : out(i, j)) += scale * s;
        }
    return out;
}

class LowRank : public ::testing::TestWithParam<bool> {};

TEST_P(LowRank, BlocksAndRowsEqualTheExplicitProduct) {
    const bool transposed = GetParam();
    std::mt19937_64 rng(5);
    const std::int64_t out_dim = 12, in_dim = 9, r = 3;
    const auto a = random_matrix(r, in_dim, rng), b = random_matrix(out_dim, r, rng);
    const auto w = transposed ? random_matrix(in_dim, out_dim, rng) : random_matrix(out_dim, in_dim, rng);
    LowRankUpdate u;
    u.base = test_data::stored_tensor(w, DType::F64);
    u.a = test_data::stored_tensor(a, DType::F64, "a");
    u.b = test_data::stored_tensor(b, DType::F64, "b");
    u.rank = r, u.scale = 0.7, u.transposed = transposed;
    const auto want = explicit_update(w, a, b, u.scale, transposed);

    const auto rows = low_rank_rows(u, 2, 5);
    for (std::int64_t i = 0; i < 5; ++i)
        for (std::int64_t j = 0; j < w.cols; ++j) EXPECT_NEAR(rows(i, j), want(i + 2, j), 1e-12);

    const MatrixBlock block{1, 4, 3, 5, false};  // stored rows 1..4, columns 3..7
    const auto f = read_low_rank_block(u, block);
    ASSERT_EQ(f.l.rows, 4);
    ASSERT_EQ(f.l.cols, r);
    ASSERT_EQ(f.r.rows, r);
    ASSERT_EQ(f.r.cols, 5);
    for (std::int64_t i = 0; i < 4; ++i)
        for (std::int64_t j = 0; j < 5; ++j) {
            double s = 0;
            for (std::int64_t k = 0; k < r; ++k) s += f.l(i, k) * f.r(k, j);
            EXPECT_NEAR(s, want(1 + i, 3 + j) - w(1 + i, 3 + j), 1e-12);
        }
}

INSTANTIATE_TEST_SUITE_P(Layouts, LowRank, ::testing::Values(false, true));

}  // namespace
}  // namespace diffract
