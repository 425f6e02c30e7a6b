#include "diffract/core/low_rank.hpp"

namespace diffract {

LowRankBlock read_low_rank_block(const LowRankUpdate& u, const MatrixBlock& block) {
    const std::int64_t r = u.rank;
    // Stored L·R is B·A, or Aᵀ·Bᵀ when transposed: L's rows are B's rows or A's columns, R's columns
    // A's columns or B's rows (read transposed).
    LowRankBlock f;
    f.l = u.transposed ? read_matrix<double>(u.a, {0, r, block.row0, block.rows, true})
                       : read_matrix<double>(u.b, {block.row0, block.rows, 0, r, false});
    f.r = u.transposed ? read_matrix<double>(u.b, {block.col0, block.cols, 0, r, true})
                       : read_matrix<double>(u.a, {0, r, block.col0, block.cols, false});
    for (auto& x : f.l.data) x *= u.scale;
    return f;
}

Matrix<double> low_rank_rows(const LowRankUpdate& u, std::int64_t row0, std::int64_t rows) {
    const std::int64_t cols = stored_cols(u.base);
    auto out = read_matrix<double>(u.base, {row0, rows, 0, cols, false});
    // The base's pages are not needed again by this call: keep resident memory at the rows computed.
    u.base.release_pages();
    const auto f = read_low_rank_block(u, {row0, rows, 0, cols, false});
    for (std::int64_t i = 0; i < rows; ++i) {  // out[i, :] += Σ_k l[i, k] r[k, :]
        double* o = out.data.data() + i * cols;
        for (std::int64_t k = 0; k < u.rank; ++k) {
            const double lik = f.l(i, k);
            const double* rk = f.r.data.data() + k * cols;
            for (std::int64_t j = 0; j < cols; ++j) o[j] += lik * rk[j];
        }
    }
    return out;
}

}  // namespace diffract
