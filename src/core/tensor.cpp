#include "diffract/core/tensor.hpp"

#include "diffract/core/mapped_file.hpp"
#include "diffract/core/quantized.hpp"

namespace diffract {

std::int64_t TensorInfo::numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::int64_t TensorInfo::stored_row(std::int64_t r) const {
    if (rope_head_rows <= 0) return r;
    const std::int64_t half = rope_head_rows / 2;
    const std::int64_t within = r % rope_head_rows;
    return r - within + 2 * (within % half) + within / half;
}

const std::string& TensorInfo::path() const {
    static const std::string none;
    return file ? file->path() : none;
}

void TensorInfo::release_pages() const {
    if (file) file->dont_need(offset, nbytes);
}

std::vector<const TensorInfo*> stored_parts(const TensorInfo& t) {
    if (t.low_rank) return {&t.low_rank->base, &t.low_rank->a, &t.low_rank->b};
    if (t.quant) return t.quant->parts();
    return {&t};
}

TensorInfo element_slice(const TensorInfo& t, std::int64_t first, std::vector<std::int64_t> shape) {
    TensorInfo s = t;
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    s.offset = t.offset + dtype_bytes(t.dtype, static_cast<std::size_t>(first));
    s.nbytes = dtype_bytes(t.dtype, static_cast<std::size_t>(n));
    s.shape = std::move(shape);
    return s;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

}  // namespace diffract
