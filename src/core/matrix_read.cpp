#include <algorithm>

#include <fmt/format.h>

#include "core/release_behind_impl.hpp"
#include "diffract/core/block_quant.hpp"
#include "diffract/core/busy_threads.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/quantized.hpp"

namespace diffract {

std::int64_t stored_rows(const TensorInfo& t) { return t.shape.empty() ? 1 : t.shape[0]; }

std::int64_t stored_cols(const TensorInfo& t) {
    std::int64_t c = 1;
    for (std::size_t i = 1; i < t.shape.size(); ++i) c *= t.shape[i];
    return c;
}

void check_block_inside(const TensorInfo& t, const MatrixBlock& b) {
    const std::int64_t R = stored_rows(t), C = stored_cols(t);
    if (b.row0 < 0 || b.col0 < 0 || b.rows < 0 || b.cols < 0 || b.row0 + b.rows > R || b.col0 + b.cols > C)
        throw_input_error(t.path(), t.name,
                          fmt::format("block [{}:{}, {}:{}] outside the tensor {}", b.row0, b.row0 + b.rows,
                                      b.col0, b.col0 + b.cols, shape_string(t.shape)));
}

namespace {

// A quantized matrix decoded from its stored parts, the block alone, a slab of rows at a time (never
// its whole dense bytes).
template <typename T>
Matrix<T> read_quantized(const TensorInfo& t, const MatrixBlock& b) {
    Matrix<T> out(b.logical_rows(), b.logical_cols());
    const std::int64_t step =
        std::max<std::int64_t>(1, (std::int64_t{1} << 18) / std::max<std::int64_t>(b.cols, 1));
    std::vector<float> slab;
    for (std::int64_t r = 0; r < b.rows; r += step) {
        const std::int64_t n = std::min(step, b.rows - r);
        slab.resize(static_cast<std::size_t>(n * b.cols));
        dequantize_block(*t.quant, b.row0 + r, n, b.col0, b.cols, slab.data());
        for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t j = 0; j < b.cols; ++j) {
                const T v = static_cast<T>(slab[static_cast<std::size_t>(i * b.cols + j)]);
                if (b.transposed)
                    out(j, r + i) = v;
                else
                    out(r + i, j) = v;
            }
    }
    return out;
}

}  // namespace

template <typename T>
Matrix<T> read_matrix(const TensorInfo& t, const MatrixBlock& b) {
    if (!dtype_is_float(t.dtype))
        throw_input_error(
            t.path(), t.name,
            fmt::format("dtype {} is not a floating type and cannot be analysed", dtype_name(t.dtype)));
    check_block_inside(t, b);
    const BusyScope reading;  // the pages of a mapped input are read here
    test_fault_block_reads();
    if (t.quant) return read_quantized<T>(t, b);
    const std::int64_t C = stored_cols(t);
    const auto bytes = t.bytes();
    Matrix<T> out(b.logical_rows(), b.logical_cols());
    std::vector<T> row(static_cast<std::size_t>(b.cols));
    std::vector<float> dequant;
    // A block-quantised row is decoded whole (its blocks span the row), then the block's columns kept.
    const bool blocks = dtype_is_block(t.dtype);
    const std::size_t row_bytes = dtype_bytes(t.dtype, static_cast<std::size_t>(C));
    // A large block's mapped pages are released behind the read, a chunk at a time and the rest at
    // the end, so that its decoded copy and the whole mapped source are never resident together (an
    // embedding: 3.3 GB in f64 over 0.8 GB of bf16). Pages read again later are faulted back from the
    // page cache. (No release for rows of zero bytes, so the division below never sees one.)
    const bool release = static_cast<std::size_t>(b.rows) * row_bytes > kReleaseBehindBytes;
    const auto chunk_rows =
        release ? static_cast<std::int64_t>(std::max<std::size_t>(kReleaseBehindBytes / row_bytes, 1)) : 0;
    std::int64_t released = 0;  // rows [0, released) of the block
    auto release_to = [&](std::int64_t end) {
        t.file->dont_need(t.offset + static_cast<std::size_t>(b.row0 + released) * row_bytes,
                          static_cast<std::size_t>(end - released) * row_bytes);
        released = end;
    };
    for (std::int64_t i = 0; i < b.rows; ++i) {
        if (release && i - released == chunk_rows) release_to(i);
        const std::byte* src = bytes.data() + static_cast<std::size_t>(t.stored_row(b.row0 + i)) * row_bytes;
        T* dst = b.transposed ? row.data() : out.data.data() + i * b.cols;
        if (blocks) {
            dequant.resize(static_cast<std::size_t>(C));
            dequantize_blocks(src, t.dtype, static_cast<std::size_t>(C), dequant.data());
            for (std::int64_t j = 0; j < b.cols; ++j)
                dst[j] = static_cast<T>(dequant[static_cast<std::size_t>(b.col0 + j)]);
        } else {
            src += static_cast<std::size_t>(b.col0) * dtype_size(t.dtype);
            if constexpr (std::is_same_v<T, float>)
                convert_to_f32(src, t.dtype, static_cast<std::size_t>(b.cols), dst);
            else
                convert_to_f64(src, t.dtype, static_cast<std::size_t>(b.cols), dst);
        }
        if (b.transposed)
            for (std::int64_t j = 0; j < b.cols; ++j) out(j, i) = row[static_cast<std::size_t>(j)];
    }
    if (release) release_to(b.rows);
    return out;
}

template Matrix<float> read_matrix<float>(const TensorInfo&, const MatrixBlock&);
template Matrix<double> read_matrix<double>(const TensorInfo&, const MatrixBlock&);

}  // namespace diffract
