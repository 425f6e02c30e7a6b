// Grouping the blocks of one stored tensor (a projection and its heads) into batches of Gram
// products that a backend runs together: the CPU as one syrk per block over a single decoded copy
// of the tensor, the GPU as one strided-batched gemm per batch over the uploaded tensor. Both run
// the same description, so the index arithmetic the device depends on is exercised on every CI run.
//
// Layout: the row-major R × C stored tensor is, to column-major BLAS, the C × R matrix Wᵀ (ld C).
// A block (row0, rows r, col0, cols c) is the column-major c × r sub-matrix A at element offset
// row0·C + col0, ld C. Its singular values are those of the block (transposition does not change
// them) and are the square roots of the eigenvalues of the smaller-side Gram matrix:
//   c ≤ r: G = A Aᵀ (order c, depth r), BLAS trans 'N';
//   c > r: G = Aᵀ A (order r, depth c), BLAS trans 'T'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "diffract/core/matrix.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::linalg {

struct GramBatch {
    std::vector<std::size_t> members;  // indices into the planned blocks, in memory order
    bool trans = false;                // false: G = A Aᵀ; true: G = Aᵀ A
    std::int64_t order = 0;            // the Gram matrix's side (the block's smaller side)
    std::int64_t depth = 0;            // the block's longer side, summed over
    std::int64_t lda = 0;              // the tensor's stored columns
    std::int64_t offset = 0;           // element offset of the first member's A
    std::int64_t stride = 0;           // element offset between consecutive members (0: one member)

    std::int64_t offset_of(std::size_t member_position) const {
        return offset + static_cast<std::int64_t>(member_position) * stride;
    }
};

// Equally shaped blocks at a constant offset step form one batch (the heads of a projection, or of
// a fused QKV tensor); any other block is a batch of its own. Empty blocks are left out.
// `stored_cols` is C, the tensor's row length in elements.
std::vector<GramBatch> plan_gram_batches(std::span<const MatrixBlock> blocks, std::int64_t stored_cols);

// σ (ascending) from the eigenvalues λ (ascending) of a Gram matrix, or nothing when the auto
// route's guard finds the spectrum too ill-conditioned for the Gram route (λ_min < guard · λ_max):
// the caller then recomputes that matrix with a direct SVD. The one rule every backend applies.
std::optional<std::vector<double>> singular_values_from_gram(std::vector<double> lambda, SvdRoute route);

}  // namespace diffract::linalg
