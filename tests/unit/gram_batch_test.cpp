// Batched Gram products (gram_batch.hpp, linalg/cpu/block_values.cpp): the plan groups the heads of a
// projection into one strided batch with the offsets, leading dimension and orientation BLAS needs,
// and the batched singular values equal the block-at-a-time ones (read_matrix + singular_values)
// for row heads, column heads, fused QKV, transposed (Conv1D) blocks, bf16 / f32 / f64 storage at both
// precisions, and rank-deficient heads that the auto route must send to gesdd.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "diffract/core/error.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/linalg/gram_batch.hpp"

#include "random_matrix.hpp"
#include "stored_tensor.hpp"

using namespace diffract;
using diffract::test_data::random_matrix;
using diffract::test_data::stored_tensor;

namespace {

std::vector<MatrixBlock> row_heads(std::int64_t heads, std::int64_t dim, std::int64_t cols, bool transposed) {
    std::vector<MatrixBlock> out;
    for (std::int64_t h = 0; h < heads; ++h) out.push_back({h * dim, dim, 0, cols, transposed});
    return out;
}

std::vector<MatrixBlock> column_heads(std::int64_t heads, std::int64_t dim, std::int64_t rows) {
    std::vector<MatrixBlock> out;
    for (std::int64_t h = 0; h < heads; ++h) out.push_back({0, rows, h * dim, dim, false});
    return out;
}

void expect_batched_equals_one_by_one(const TensorInfo& t, const std::vector<MatrixBlock>& blocks, bool f64,
                                      linalg::SvdRoute route) {
    auto cpu = linalg::make_backend("cpu");
    const auto batched = cpu->block_singular_values(t, blocks, f64, route);
    const auto plain = linalg::block_singular_values_one_by_one(*cpu, t, blocks, f64, route);
    ASSERT_EQ(batched.size(), blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
        ASSERT_EQ(batched[i].size(), plain[i].size()) << "block " << i;
        const double top = plain[i].empty() ? 0 : plain[i].back();
        // Both sum the same f64 products (syrk), in a different order: agreement to ~1e-13 of σ_max.
        for (std::size_t c = 0; c < plain[i].size(); ++c)
            EXPECT_NEAR(batched[i][c], plain[i][c], 1e-11 * top) << "block " << i << " component " << c;
    }
}

}  // namespace

TEST(GramBatch, HeadsOfAProjectionFormOneStridedBatch) {
    // q_proj 64 × 32 stored, 8 heads of 8 rows: blocks 8 × 32 at offsets 256 h.
    const auto rows = row_heads(8, 8, 32, false);
    auto plan = linalg::plan_gram_batches(rows, 32);
    ASSERT_EQ(plan.size(), 1u);
    EXPECT_EQ(plan[0].members.size(), 8u);
    EXPECT_TRUE(plan[0].trans);  // 8 rows < 32 cols: G = AᵀA of the col-major 32 × 8 view
    EXPECT_EQ(plan[0].order, 8);
    EXPECT_EQ(plan[0].depth, 32);
    EXPECT_EQ(plan[0].lda, 32);
    EXPECT_EQ(plan[0].offset, 0);
    EXPECT_EQ(plan[0].stride, 256);
    EXPECT_EQ(plan[0].offset_of(3), 768);

    // o_proj 32 × 64 stored, heads are 8-column slices: offsets 8 h, G = A Aᵀ.
    const auto cols = column_heads(8, 8, 32);
    plan = linalg::plan_gram_batches(cols, 64);
    ASSERT_EQ(plan.size(), 1u);
    EXPECT_FALSE(plan[0].trans);
    EXPECT_EQ(plan[0].order, 8);
    EXPECT_EQ(plan[0].depth, 32);
    EXPECT_EQ(plan[0].lda, 64);
    EXPECT_EQ(plan[0].stride, 8);
}

TEST(GramBatch, WholeMatrixIrregularAndEmptyBlocksAreBatchesOfTheirOwn) {
    std::vector<MatrixBlock> blocks = {{0, 64, 0, 32, false}};  // the whole matrix
    for (auto b : row_heads(4, 8, 32, false)) blocks.push_back(b);
    blocks.push_back({48, 8, 0, 32, false});  // same shape, but the step 48 ≠ 8 rows breaks the stride
    blocks.push_back({0, 0, 0, 32, false});   // empty
    const auto plan = linalg::plan_gram_batches(blocks, 32);
    ASSERT_EQ(plan.size(), 3u);
    std::vector<std::size_t> sizes;
    for (const auto& b : plan) sizes.push_back(b.members.size());
    std::sort(sizes.begin(), sizes.end());
    EXPECT_EQ(sizes, (std::vector<std::size_t>{1, 1, 4}));
    for (const auto& b : plan)
        for (auto m : b.members) EXPECT_NE(m, 6u) << "the empty block is not planned";
}

TEST(GramBatch, GuardSendsIllConditionedSpectraToADirectSvd) {
    EXPECT_FALSE(linalg::singular_values_from_gram({1e-12, 1.0}, linalg::SvdRoute::auto_route));
    const auto forced = linalg::singular_values_from_gram({1e-12, 4.0}, linalg::SvdRoute::gram);
    ASSERT_TRUE(forced);
    EXPECT_DOUBLE_EQ((*forced)[1], 2.0);
    const auto fine = linalg::singular_values_from_gram({-1e-18, 1e-6, 9.0}, linalg::SvdRoute::auto_route);
    EXPECT_FALSE(fine) << "λ_min ≤ 0 trips the guard";
    const auto ok = linalg::singular_values_from_gram({0.25, 9.0}, linalg::SvdRoute::auto_route);
    ASSERT_TRUE(ok);
    EXPECT_DOUBLE_EQ((*ok)[0], 0.5);
}

TEST(GramBatch, BatchedRowAndColumnHeadsEqualBlockAtATime) {
    const auto w = random_matrix(64, 48, 7);
    for (DType dtype : {DType::BF16, DType::F32, DType::F64}) {
        const auto t = stored_tensor(w, dtype);
        for (bool f64 : {false, true})
            for (auto route : {linalg::SvdRoute::auto_route, linalg::SvdRoute::gram}) {
                SCOPED_TRACE(std::string(dtype_name(dtype)) + (f64 ? " f64" : " f32"));
                auto blocks = row_heads(8, 8, 48, false);
                blocks.insert(blocks.begin(), {0, 64, 0, 48, false});
                expect_batched_equals_one_by_one(t, blocks, f64, route);
                expect_batched_equals_one_by_one(t, column_heads(6, 8, 64), f64, route);
                expect_batched_equals_one_by_one(t, row_heads(8, 8, 48, true), f64, route);  // Conv1D
            }
    }
}

TEST(GramBatch, FusedQkvWithGroupedKeyValueHeads) {
    // Phi-3 style qkv_proj: 4 query heads, then 2 key and 2 value heads, 8 rows each, 24 columns.
    const auto w = random_matrix(64, 24, 11);
    const auto t = stored_tensor(w, DType::BF16);
    const auto blocks = row_heads(8, 8, 24, false);
    const auto plan = linalg::plan_gram_batches(blocks, 24);
    ASSERT_EQ(plan.size(), 1u);
    EXPECT_EQ(plan[0].members.size(), 8u);
    expect_batched_equals_one_by_one(t, blocks, false, linalg::SvdRoute::auto_route);
}

TEST(GramBatch, RankDeficientHeadsFallBackToGesddOnAuto) {
    // Heads of rank 2 (8 × 32 blocks): λ_min/λ_max is at rounding level, below the guard.
    const auto t = stored_tensor(test_data::rank2_matrix(32, 32, 4), DType::F32);
    const auto blocks = row_heads(4, 8, 32, false);
    auto cpu = linalg::make_backend("cpu");
    const auto batched = cpu->block_singular_values(t, blocks, false, linalg::SvdRoute::auto_route);
    const auto direct =
        linalg::block_singular_values_one_by_one(*cpu, t, blocks, false, linalg::SvdRoute::gesdd);
    for (std::size_t i = 0; i < blocks.size(); ++i) EXPECT_EQ(batched[i], direct[i]) << "head " << i;
    // Forced Gram keeps its own (different) small values: the comparison above can fail.
    const auto forced = cpu->block_singular_values(t, blocks, false, linalg::SvdRoute::gram);
    EXPECT_NE(forced[0], direct[0]);
}

TEST(GramBatch, BlocksOutsideTheTensorAreRefusedBeforeAnyIndexing) {
    const auto t = stored_tensor(random_matrix(16, 8, 1), DType::F32);
    auto blocks = row_heads(3, 8, 8, false);  // the third head runs past row 16
    auto cpu = linalg::make_backend("cpu");
    try {
        cpu->block_singular_values(t, blocks, false, linalg::SvdRoute::auto_route);
        FAIL() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("outside the tensor"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(t.name), std::string::npos) << e.what();
    }
}
