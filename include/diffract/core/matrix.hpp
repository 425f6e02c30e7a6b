// A dense row-major matrix, and the reading of a block of a stored tensor into one.
#pragma once

#include <cstdint>
#include <vector>

#include "diffract/core/buffer_pool.hpp"
#include "diffract/core/tensor.hpp"

namespace diffract {

template <typename T>
struct Matrix {
    std::int64_t rows = 0, cols = 0;
    PooledVector<T> data;  // row-major, rows * cols; large ones recycled (core/buffer_pool.hpp)

    Matrix() = default;
    Matrix(std::int64_t r, std::int64_t c) : rows(r), cols(c), data(static_cast<std::size_t>(r * c)) {}
    T& operator()(std::int64_t i, std::int64_t j) { return data[static_cast<std::size_t>(i * cols + j)]; }
    const T& operator()(std::int64_t i, std::int64_t j) const {
        return data[static_cast<std::size_t>(i * cols + j)];
    }
};

// A rectangular block of a stored 2-D tensor (N-D tensors are viewed as shape[0] × rest), in stored
// coordinates. `transposed`: the logical matrix (out × in, as torch's Linear) is the block's
// transpose, as for GPT-2's Conv1D weights stored [in, out].
struct MatrixBlock {
    std::int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
    bool transposed = false;
    std::int64_t logical_rows() const { return transposed ? cols : rows; }
    std::int64_t logical_cols() const { return transposed ? rows : cols; }
};

// Reads `block` of `t` into a logical matrix of T (float or double), decoding the storage dtype
// (bf16/f16/f8/f32/f64, the GGUF block-quantised types of core/block_quant.hpp), in logical row
// order (TensorInfo::stored_row). Touches only the rows of the block in the mapping.
// Throws InputError for integer or unsupported dtypes and for blocks outside the tensor.
template <typename T>
Matrix<T> read_matrix(const TensorInfo& t, const MatrixBlock& block);

// Throws InputError (naming the file and tensor) unless `block` lies inside the stored tensor.
void check_block_inside(const TensorInfo& t, const MatrixBlock& block);

// The stored tensor viewed as a 2-D matrix: rows = shape[0], cols = product of the rest.
std::int64_t stored_rows(const TensorInfo& t);
std::int64_t stored_cols(const TensorInfo& t);

}  // namespace diffract
