#include "nonfinite_guard_impl.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/edit/edit.hpp"

namespace diffract::edit {
namespace {

constexpr std::size_t kChunk = 1 << 16;  // values decoded at a time

// Calls visit(index, value) for every NaN/Inf entry of `bytes` (n values of `dtype`).
template <typename Visit>
void for_each_nonfinite(std::span<const std::byte> bytes, DType dtype, std::size_t n, Visit visit) {
    std::vector<double> v(std::min(kChunk, n));
    const std::size_t size = dtype_size(dtype);
    for (std::size_t start = 0; start < n; start += kChunk) {
        const std::size_t len = std::min(kChunk, n - start);
        convert_to_f64(bytes.data() + start * size, dtype, len, v.data());
        for (std::size_t i = 0; i < len; ++i)
            if (!std::isfinite(v[i])) visit(start + i, v[i]);
    }
}

}  // namespace

std::vector<char> nonfinite_mask(const TensorInfo& primary, const std::vector<const TensorInfo*>& inputs,
                                 bool allow) {
    std::vector<const TensorInfo*> all{&primary};
    all.insert(all.end(), inputs.begin(), inputs.end());
    std::vector<char> mask;
    for (const auto* t : all) {
        const auto n = static_cast<std::size_t>(t->numel());
        std::int64_t count = 0;
        for_each_nonfinite(t->bytes(), t->dtype, n, [&](std::size_t, double) { ++count; });
        if (count == 0) continue;
        if (!allow)
            throw_input_error(t->path(), t->name,
                              nonfinite_what(count) +
                                  ": edits refuse non-finite weights (--allow-nonfinite keeps them unchanged "
                                  "and edits the rest)");
        mask.resize(n, 0);
        for_each_nonfinite(t->bytes(), t->dtype, n, [&](std::size_t i, double) { mask[i] = 1; });
    }
    return mask;
}

void finish_output(const TensorInfo& primary, const std::vector<char>& mask, std::span<std::byte> out) {
    const std::size_t size = dtype_size(primary.dtype);
    const auto n = static_cast<std::size_t>(primary.numel());
    if (out.size() != n * size)
        throw std::logic_error("finish_output: output size does not match the tensor");
    if (!mask.empty()) {
        const auto src = primary.bytes();
        for (std::size_t i = 0; i < n; ++i)
            if (mask[i]) std::memcpy(out.data() + i * size, src.data() + i * size, size);
    }
    for_each_nonfinite(out, primary.dtype, n, [&](std::size_t i, double v) {
        if (!mask.empty() && mask[i]) return;
        const std::int64_t cols = stored_cols(primary);
        throw_input_error(
            primary.path(), primary.name,
            fmt::format("the edited value at [{}, {}] is {} in {}: the edit overflows the dtype (expected "
                        "finite values where the input is finite)",
                        static_cast<std::int64_t>(i) / cols, static_cast<std::int64_t>(i) % cols, v,
                        dtype_name(primary.dtype)));
    });
}

void decode_masked_into(const EditTensor& e, const TensorInfo& t, std::span<double> out) {
    decode_into(t, out);
    if (e.nonfinite)
        for (std::size_t i = 0; i < out.size() && i < e.nonfinite->size(); ++i)
            if ((*e.nonfinite)[i]) out[i] = 0;
}

std::vector<double> decode_masked(const EditTensor& e, const TensorInfo& t) {
    std::vector<double> v(static_cast<std::size_t>(t.numel()));
    decode_masked_into(e, t, v);
    return v;
}

}  // namespace diffract::edit
