#include "diffract/core/plain_view.hpp"

#include <cstring>
#include <vector>

#include "diffract/core/block_quant.hpp"
#include "diffract/core/matrix.hpp"

namespace diffract {

bool is_plain(const TensorInfo& t) { return !dtype_is_block(t.dtype) && t.rope_head_rows == 0; }

TensorInfo plain_view(const TensorInfo& t) {
    if (is_plain(t)) return t;
    TensorInfo view;
    view.name = t.name;
    view.shape = t.shape;
    view.dtype = dtype_is_block(t.dtype) ? DType::F32 : t.dtype;
    const auto rows = stored_rows(t);
    const auto cols = static_cast<std::size_t>(stored_cols(t));
    const std::size_t in_row = dtype_bytes(t.dtype, cols), out_row = cols * dtype_size(view.dtype);
    view.nbytes = static_cast<std::size_t>(rows) * out_row;
    view.file = MappedFile::generated(
        t.path(), view.nbytes, [t, rows, cols, in_row, out_row](std::span<std::byte> out) {
            const auto stored = t.bytes();
            std::vector<float> values(dtype_is_block(t.dtype) ? cols : 0);
            for (std::int64_t r = 0; r < rows; ++r) {
                const std::byte* src = stored.data() + static_cast<std::size_t>(t.stored_row(r)) * in_row;
                std::byte* dst = out.data() + static_cast<std::size_t>(r) * out_row;
                if (dtype_is_block(t.dtype)) {
                    dequantize_blocks(src, t.dtype, cols, values.data());
                    std::memcpy(dst, values.data(), out_row);
                } else {
                    std::memcpy(dst, src, out_row);
                }
            }
        });
    return view;
}

}  // namespace diffract
