#include "diffract/core/quantized.hpp"

#include <array>
#include <cmath>
#include <cstring>

#include "diffract/core/dtype.hpp"

namespace diffract {
namespace {

// E2M1 (FP4) values by code: sign bit 3, then exponent and mantissa (OCP MX and NVFP4 alike).
constexpr std::array<float, 16> kE2M1{0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// AWQ packs output columns 8p + {0, 2, 4, 6, 1, 3, 5, 7} into nibbles 0..7 of word p: column 8p + t
// is in nibble kAwqNibble[t].
constexpr std::array<int, 8> kAwqNibble{0, 4, 1, 5, 2, 6, 3, 7};

std::uint32_t word_at(const std::byte* base, std::size_t index) {
    std::uint32_t w;
    std::memcpy(&w, base + index * 4, 4);
    return w;
}

// Field i (`bits` wide) of a little-endian bit stream through 32-bit words word(0), word(1), ...
template <typename Word>
std::uint32_t field(Word&& word, std::int64_t i, int bits) {
    const auto bit = static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(bits);
    const auto k = static_cast<std::int64_t>(bit >> 5);
    const auto shift = static_cast<unsigned>(bit & 31);
    std::uint64_t v = word(k) >> shift;
    if (shift + static_cast<unsigned>(bits) > 32)
        v |= static_cast<std::uint64_t>(word(k + 1)) << (32 - shift);
    return static_cast<std::uint32_t>(v & ((std::uint64_t{1} << bits) - 1));
}

// Every value of a small tensor (scales, zero points, indices, maps) as f32.
std::vector<float> values_of(const TensorInfo& t) {
    const auto n = static_cast<std::size_t>(t.numel());
    std::vector<float> out(n);
    const std::byte* p = t.bytes().data();
    switch (t.dtype) {
        case DType::I32:
            for (std::size_t i = 0; i < n; ++i)
                out[i] = static_cast<float>(static_cast<std::int32_t>(word_at(p, i)));
            break;
        case DType::I64:
            for (std::size_t i = 0; i < n; ++i) {
                std::int64_t v;
                std::memcpy(&v, p + i * 8, 8);
                out[i] = static_cast<float>(v);
            }
            break;
        case DType::I8:
            for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<std::int8_t>(p[i]));
            break;
        case DType::U8:
            for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<std::uint8_t>(p[i]));
            break;
        default:
            convert_to_f32(p, t.dtype, n, out.data());
    }
    return out;
}

// The scale of each group as the decoders multiply it: E8M0 exponents as powers of two, NVFP4's F8
// scales over the global scale, LLM.int8's row maxima over 127, bnb's absmax through its nested
// quantization.
std::vector<float> scales_of(const QuantizedWeight& q) {
    if (q.scheme == QuantScheme::mxfp4) {
        const auto n = static_cast<std::size_t>(q.scale.numel());
        const auto* p = reinterpret_cast<const std::uint8_t*>(q.scale.bytes().data());
        std::vector<float> out(n);
        for (std::size_t i = 0; i < n; ++i) out[i] = std::ldexp(1.0f, static_cast<int>(p[i]) - 127);
        return out;
    }
    auto s = values_of(q.scale);
    if (q.scheme == QuantScheme::nvfp4) {
        const float global = values_of(*q.global_scale).at(0);
        for (auto& v : s) v /= global;
    } else if (q.scheme == QuantScheme::int8_row) {
        for (auto& v : s) v /= 127.0f;
    } else if (q.scheme == QuantScheme::bnb_4bit && q.nested_scale) {
        const auto nested = values_of(*q.nested_scale), map = values_of(*q.nested_map);
        const auto offset = static_cast<float>(q.nested_offset);
        for (std::size_t b = 0; b < s.size(); ++b)
            s[b] = map[static_cast<std::size_t>(s[b])] *
                       nested[b / static_cast<std::size_t>(q.nested_blocksize)] +
                   offset;
    }
    return s;
}

// The group (column of the scale grid) of each logical column.
std::vector<std::int64_t> column_groups(const QuantizedWeight& q) {
    std::vector<std::int64_t> g(static_cast<std::size_t>(q.cols));
    if (q.group_index) {
        const auto idx = values_of(*q.group_index);
        for (std::size_t c = 0; c < g.size(); ++c) g[c] = static_cast<std::int64_t>(idx[c]);
    } else {
        for (std::size_t c = 0; c < g.size(); ++c) g[c] = static_cast<std::int64_t>(c) / q.block_cols;
    }
    return g;
}

void decode_fp8_row(const QuantizedWeight& q, std::int64_t r, const std::vector<float>& scale, float* out) {
    const std::byte* src =
        q.codes.bytes().data() + static_cast<std::size_t>(r * q.cols) * dtype_size(q.codes.dtype);
    if (q.codes.dtype == DType::I8)
        for (std::int64_t c = 0; c < q.cols; ++c)
            out[c] = static_cast<float>(static_cast<std::int8_t>(src[c]));
    else
        convert_to_f32(src, q.codes.dtype, static_cast<std::size_t>(q.cols), out);
    if (q.scheme == QuantScheme::int8_row) {
        for (std::int64_t c = 0; c < q.cols; ++c) out[c] *= scale[static_cast<std::size_t>(r)];
        return;
    }
    const std::int64_t grid_cols = (q.cols + q.block_cols - 1) / q.block_cols;
    const float* row_scales = scale.data() + (r / q.block_rows) * grid_cols;
    for (std::int64_t c = 0; c < q.cols; ++c) out[c] *= row_scales[c / q.block_cols];
}

void decode_fp4_row(const QuantizedWeight& q, std::int64_t r, const std::vector<float>& scale, float* out) {
    r = q.row_first + r * q.row_step;
    const auto* src = reinterpret_cast<const std::uint8_t*>(q.codes.bytes().data()) + r * (q.cols / 2);
    const std::int64_t per = q.block_cols, groups = q.cols / per;
    for (std::int64_t c = 0; c < q.cols; c += 2) {
        const std::uint8_t b = src[c / 2];
        const float s = scale[static_cast<std::size_t>(r * groups + c / per)];
        out[c] = kE2M1[b & 0xF] * s;
        out[c + 1] = kE2M1[b >> 4] * s;
    }
}

}  // namespace

std::string_view quant_scheme_name(QuantScheme s) {
    switch (s) {
        case QuantScheme::fp8:
            return "fp8";
        case QuantScheme::int8_row:
            return "bitsandbytes int8";
        case QuantScheme::mxfp4:
            return "mxfp4";
        case QuantScheme::nvfp4:
            return "nvfp4";
        case QuantScheme::packed_int:
            return "compressed-tensors int";
        case QuantScheme::gptq:
            return "gptq";
        case QuantScheme::awq:
            return "awq";
        case QuantScheme::bnb_4bit:
            return "bitsandbytes 4-bit";
    }
    return "unknown";
}

std::vector<const TensorInfo*> QuantizedWeight::parts() const {
    std::vector<const TensorInfo*> out{&codes, &scale};
    for (const auto* o : {&zeros, &group_index, &global_scale, &quant_map, &nested_scale, &nested_map})
        if (*o) out.push_back(&**o);
    return out;
}

void dequantize_rows(const QuantizedWeight& q, std::int64_t row0, std::int64_t n, float* out) {
    const auto scale = scales_of(q);
    const std::byte* codes = q.codes.bytes().data();
    switch (q.scheme) {
        case QuantScheme::fp8:
        case QuantScheme::int8_row:
            for (std::int64_t i = 0; i < n; ++i) decode_fp8_row(q, row0 + i, scale, out + i * q.cols);
            return;
        case QuantScheme::mxfp4:
        case QuantScheme::nvfp4:
            for (std::int64_t i = 0; i < n; ++i) decode_fp4_row(q, row0 + i, scale, out + i * q.cols);
            return;
        case QuantScheme::packed_int: {
            const auto groups = column_groups(q);
            const std::int64_t words = (q.cols * q.bits + 31) / 32;
            const std::int64_t grid_cols = (q.cols + q.block_cols - 1) / q.block_cols;
            const auto offset = static_cast<float>(1 << (q.bits - 1));
            for (std::int64_t i = 0; i < n; ++i) {
                const std::int64_t r = row0 + i;
                auto word = [&](std::int64_t k) {
                    return word_at(codes, static_cast<std::size_t>(r * words + k));
                };
                for (std::int64_t c = 0; c < q.cols; ++c)
                    out[i * q.cols + c] = (static_cast<float>(field(word, c, q.bits)) - offset) *
                                          scale[static_cast<std::size_t>(r * grid_cols + groups[c])];
            }
            return;
        }
        case QuantScheme::gptq:
        case QuantScheme::awq: {
            // Scales and zero points are [groups, out]; the codes run along the input dimension (GPTQ,
            // a column of qweight per output) or along the output dimension (AWQ).
            const auto groups = column_groups(q);
            const std::byte* zeros = q.zeros->bytes().data();
            const std::int64_t zero_words = q.zeros->shape[1];
            const float zero_shift = q.zero_minus_one ? 1.0f : 0.0f;
            for (std::int64_t i = 0; i < n; ++i) {
                const std::int64_t r = row0 + i;
                for (std::int64_t c = 0; c < q.cols; ++c) {
                    const std::int64_t g = groups[static_cast<std::size_t>(c)];
                    std::uint32_t code, zero;
                    if (q.scheme == QuantScheme::gptq) {
                        code = field(
                            [&](std::int64_t k) {
                                return word_at(codes, static_cast<std::size_t>(k * q.rows + r));
                            },
                            c, q.bits);
                        zero = field(
                            [&](std::int64_t k) {
                                return word_at(zeros, static_cast<std::size_t>(g * zero_words + k));
                            },
                            r, q.bits);
                    } else {
                        const int nibble = kAwqNibble[static_cast<std::size_t>(r % 8)] * 4;
                        code =
                            (word_at(codes, static_cast<std::size_t>(c * (q.rows / 8) + r / 8)) >> nibble) &
                            0xF;
                        zero = (word_at(zeros, static_cast<std::size_t>(g * zero_words + r / 8)) >> nibble) &
                               0xF;
                    }
                    out[i * q.cols + c] =
                        (static_cast<float>(code) - (static_cast<float>(zero) + zero_shift)) *
                        scale[static_cast<std::size_t>(g * q.rows + r)];
                }
            }
            return;
        }
        case QuantScheme::bnb_4bit: {
            const auto map = values_of(*q.quant_map);
            const auto* bytes = reinterpret_cast<const std::uint8_t*>(codes);
            for (std::int64_t i = 0; i < n; ++i)
                for (std::int64_t c = 0; c < q.cols; ++c) {
                    const auto e = static_cast<std::size_t>((row0 + i) * q.cols + c);
                    const std::uint8_t b = bytes[e / 2];
                    const std::uint8_t code = (e % 2 == 0) ? (b >> 4) : (b & 0xF);
                    out[i * q.cols + c] = map[code] * scale[e / static_cast<std::size_t>(q.blocksize)];
                }
            return;
        }
    }
}

}  // namespace diffract
