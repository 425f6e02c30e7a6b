// Reading a low-rank update (TensorInfo::low_rank, a merged LoRA module) by its factors: a block of
// base + scale · L·R without forming the product of the whole matrix.
#pragma once

#include "diffract/core/matrix.hpp"
#include "diffract/core/tensor.hpp"

namespace diffract {

// The factors of `block` (stored coordinates) of the update: `l` = scale · L[block rows] (block rows
// × r) and `r` = R[:, block columns] (r × block columns), so that the block of the update is l·r.
struct LowRankBlock {
    Matrix<double> l, r;
};
LowRankBlock read_low_rank_block(const LowRankUpdate& u, const MatrixBlock& block);

// Rows [row0, row0 + rows) of base + scale · L·R, all columns, computed in f64 (stored coordinates).
Matrix<double> low_rank_rows(const LowRankUpdate& u, std::int64_t row0, std::int64_t rows);

}  // namespace diffract
