#include "diffract/core/quantized.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "diffract/core/dtype.hpp"
#include "diffract/core/mapped_file.hpp"

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

// `n` values of a tensor from element `first` as f32 into out (scales, zero points, indices, maps).
void values_into(const TensorInfo& t, std::size_t first, std::size_t n, float* out) {
    const std::byte* p = t.bytes().data() + first * dtype_size(t.dtype);
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
            convert_to_f32(p, t.dtype, n, out);
    }
}

std::vector<float> values_of(const TensorInfo& t, std::size_t first, std::size_t n) {
    std::vector<float> out(n);
    values_into(t, first, n, out.data());
    return out;
}

std::vector<float> values_of(const TensorInfo& t) {
    return values_of(t, 0, static_cast<std::size_t>(t.numel()));
}

// A block of logical rows [row0, row0 + n) and columns [col0, col0 + m), decoded into out (n × m).
struct Block {
    std::int64_t row0, n, col0, m;
    float* out;
    float& at(std::int64_t i, std::int64_t j) const { return out[i * m + j]; }
};

// The group (column of the scale grid) of each logical column of the block.
std::vector<std::int64_t> column_groups(const QuantizedWeight& q, const Block& b) {
    std::vector<std::int64_t> g(static_cast<std::size_t>(b.m));
    if (q.group_index) {
        const auto idx = values_of(*q.group_index, static_cast<std::size_t>(b.col0), g.size());
        for (std::size_t c = 0; c < g.size(); ++c) g[c] = static_cast<std::int64_t>(idx[c]);
    } else {
        for (std::size_t c = 0; c < g.size(); ++c)
            g[c] = (b.col0 + static_cast<std::int64_t>(c)) / q.block_cols;
    }
    return g;
}

// FP8 and int8 codes with a scale grid (LLM.int8: SCB / 127 per row).
void decode_scaled(const QuantizedWeight& q, const Block& b) {
    const std::int64_t grid_cols = (q.cols + q.block_cols - 1) / q.block_cols;
    const std::size_t es = dtype_size(q.codes.dtype);
    const std::int64_t g0 = b.col0 / q.block_cols, g1 = (b.col0 + b.m - 1) / q.block_cols;
    std::vector<float> scales(static_cast<std::size_t>(g1 - g0 + 1));
    for (std::int64_t i = 0; i < b.n; ++i) {
        const std::int64_t r = b.row0 + i;
        float* dst = b.out + i * b.m;
        const std::byte* src = q.codes.bytes().data() + static_cast<std::size_t>(r * q.cols + b.col0) * es;
        if (q.codes.dtype == DType::I8)
            for (std::int64_t c = 0; c < b.m; ++c)
                dst[c] = static_cast<float>(static_cast<std::int8_t>(src[c]));
        else
            convert_to_f32(src, q.codes.dtype, static_cast<std::size_t>(b.m), dst);
        if (q.scheme == QuantScheme::int8_row) {
            float s;
            values_into(q.scale, static_cast<std::size_t>(r), 1, &s);
            s /= 127.0f;
            for (std::int64_t c = 0; c < b.m; ++c) dst[c] *= s;
            continue;
        }
        values_into(q.scale, static_cast<std::size_t>((r / q.block_rows) * grid_cols + g0), scales.size(),
                    scales.data());
        if (q.block_cols >= b.m + (b.col0 % q.block_cols)) {  // one scale for the row's whole block
            const float s = scales[0];
            for (std::int64_t c = 0; c < b.m; ++c) dst[c] *= s;
            continue;
        }
        for (std::int64_t c = 0; c < b.m; ++c)
            dst[c] *= scales[static_cast<std::size_t>((b.col0 + c) / q.block_cols - g0)];
    }
}

// E2M1 nibbles, low nibble first: MXFP4 (E8M0 scale per 32) and NVFP4 (F8 scale per 16 over a global).
void decode_fp4(const QuantizedWeight& q, const Block& b) {
    const std::int64_t per = q.block_cols, groups = q.cols / per;
    const float global = q.global_scale ? values_of(*q.global_scale).at(0) : 1.0f;
    const auto* codes = reinterpret_cast<const std::uint8_t*>(q.codes.bytes().data());
    const auto* e8m0 = reinterpret_cast<const std::uint8_t*>(q.scale.bytes().data());
    std::vector<float> scales;
    for (std::int64_t i = 0; i < b.n; ++i) {
        const std::int64_t r = q.row_first + (b.row0 + i) * q.row_step;
        if (q.scheme == QuantScheme::mxfp4) {
            scales.resize(static_cast<std::size_t>(groups));
            for (std::int64_t g = 0; g < groups; ++g)
                scales[static_cast<std::size_t>(g)] =
                    std::ldexp(1.0f, static_cast<int>(e8m0[r * groups + g]) - 127);
        } else {
            scales =
                values_of(q.scale, static_cast<std::size_t>(r * groups), static_cast<std::size_t>(groups));
            for (auto& v : scales) v /= global;
        }
        const std::uint8_t* row = codes + r * (q.cols / 2);
        for (std::int64_t j = 0; j < b.m; ++j) {
            const std::int64_t c = b.col0 + j;
            const std::uint8_t byte = row[c / 2];
            b.at(i, j) =
                kE2M1[(c % 2 == 0) ? (byte & 0xF) : (byte >> 4)] * scales[static_cast<std::size_t>(c / per)];
        }
    }
}

// compressed-tensors pack-quantized: each row's fields along the input dimension, offset by 2^(bits−1).
void decode_packed_int(const QuantizedWeight& q, const Block& b) {
    const auto groups = column_groups(q, b);
    const std::int64_t words = (q.cols * q.bits + 31) / 32;
    const std::int64_t grid_cols = (q.cols + q.block_cols - 1) / q.block_cols;
    const auto offset = static_cast<float>(1 << (q.bits - 1));
    const std::byte* codes = q.codes.bytes().data();
    for (std::int64_t i = 0; i < b.n; ++i) {
        const std::int64_t r = b.row0 + i;
        const auto scales =
            values_of(q.scale, static_cast<std::size_t>(r * grid_cols), static_cast<std::size_t>(grid_cols));
        auto word = [&](std::int64_t k) { return word_at(codes, static_cast<std::size_t>(r * words + k)); };
        for (std::int64_t j = 0; j < b.m; ++j)
            b.at(i, j) = (static_cast<float>(field(word, b.col0 + j, q.bits)) - offset) *
                         scales[static_cast<std::size_t>(groups[static_cast<std::size_t>(j)])];
    }
}

// GPTQ and AWQ: scales and zero points [groups, out]. Columns outer and rows inner, so that the codes
// (a column of qweight per output for GPTQ, eight outputs per word for AWQ) are read along memory.
void decode_grouped(const QuantizedWeight& q, const Block& b) {
    const auto groups = column_groups(q, b);
    // The block's rows' scales and zero points of the groups its columns use, [group − g0][row].
    const std::int64_t g0 = *std::min_element(groups.begin(), groups.end()),
                       g1 = *std::max_element(groups.begin(), groups.end());
    const std::int64_t zero_words = q.zeros->shape[1];
    const float zero_shift = q.zero_minus_one ? 1.0f : 0.0f;
    const std::byte* codes = q.codes.bytes().data();
    const std::byte* zeros = q.zeros->bytes().data();
    const bool gptq = q.scheme == QuantScheme::gptq;
    std::vector<float> scale(static_cast<std::size_t>((g1 - g0 + 1) * b.n)), zero(scale.size());
    for (std::int64_t g = g0; g <= g1; ++g) {
        float* s = scale.data() + (g - g0) * b.n;
        float* z = zero.data() + (g - g0) * b.n;
        values_into(q.scale, static_cast<std::size_t>(g * q.rows + b.row0), static_cast<std::size_t>(b.n), s);
        auto zero_word = [&](std::int64_t k) {
            return word_at(zeros, static_cast<std::size_t>(g * zero_words + k));
        };
        for (std::int64_t i = 0; i < b.n; ++i) {
            const std::int64_t r = b.row0 + i;
            const std::uint32_t stored =
                gptq ? field(zero_word, r, q.bits)
                     : (zero_word(r / 8) >> (kAwqNibble[static_cast<std::size_t>(r % 8)] * 4)) & 0xF;
            z[i] = static_cast<float>(stored) + zero_shift;
        }
    }
    const auto mask = static_cast<std::uint32_t>((std::uint64_t{1} << q.bits) - 1);
    for (std::int64_t j = 0; j < b.m; ++j) {
        const std::int64_t c = b.col0 + j;
        const std::size_t g = static_cast<std::size_t>((groups[static_cast<std::size_t>(j)] - g0) * b.n);
        const float* s = scale.data() + g;
        const float* z = zero.data() + g;
        float* dst = b.out + j;
        if (gptq && 32 % q.bits == 0) {  // 2, 4, 8 bits: a column's fields sit in one word row
            const std::byte* words =
                codes + static_cast<std::size_t>((c * q.bits / 32) * q.rows + b.row0) * 4;
            const auto shift = static_cast<unsigned>((c * q.bits) % 32);
            for (std::int64_t i = 0; i < b.n; ++i)
                dst[i * b.m] =
                    (static_cast<float>((word_at(words, static_cast<std::size_t>(i)) >> shift) & mask) -
                     z[i]) *
                    s[i];
        } else if (gptq) {
            for (std::int64_t i = 0; i < b.n; ++i) {
                const std::int64_t r = b.row0 + i;
                const auto code = field(
                    [&](std::int64_t k) { return word_at(codes, static_cast<std::size_t>(k * q.rows + r)); },
                    c, q.bits);
                dst[i * b.m] = (static_cast<float>(code) - z[i]) * s[i];
            }
        } else {
            const std::byte* words = codes + static_cast<std::size_t>(c * (q.rows / 8)) * 4;
            for (std::int64_t i = 0; i < b.n; ++i) {
                const std::int64_t r = b.row0 + i;
                const auto code = (word_at(words, static_cast<std::size_t>(r / 8)) >>
                                   (kAwqNibble[static_cast<std::size_t>(r % 8)] * 4)) &
                                  0xF;
                dst[i * b.m] = (static_cast<float>(code) - z[i]) * s[i];
            }
        }
    }
}

// A plain floating matrix through strides (one expert of a packed tensor stored transposed or interleaved).
void decode_strided(const QuantizedWeight& q, const Block& b) {
    const std::size_t es = dtype_size(q.codes.dtype);
    const std::byte* base = q.codes.bytes().data();
    for (std::int64_t i = 0; i < b.n; ++i)
        for (std::int64_t j = 0; j < b.m; ++j) {
            const std::int64_t e = q.first + (b.row0 + i) * q.row_stride + (b.col0 + j) * q.col_stride;
            convert_to_f32(base + static_cast<std::size_t>(e) * es, q.codes.dtype, 1, &b.at(i, j));
        }
}

// bitsandbytes 4-bit: the matrix flattened row-major, high nibble first, quant_map[code] · absmax.
void decode_bnb_4bit(const QuantizedWeight& q, const Block& b) {
    const auto map = values_of(*q.quant_map);
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(q.codes.bytes().data());
    const auto bs = static_cast<std::size_t>(q.blocksize);
    const std::size_t first = static_cast<std::size_t>(b.row0 * q.cols + b.col0),
                      last = static_cast<std::size_t>((b.row0 + b.n - 1) * q.cols + b.col0 + b.m - 1);
    auto absmax = values_of(q.scale, first / bs, last / bs - first / bs + 1);
    if (q.nested_scale) {
        const auto nested = values_of(*q.nested_scale), nested_map = values_of(*q.nested_map);
        const auto nb = static_cast<std::size_t>(q.nested_blocksize);
        const auto offset = static_cast<float>(q.nested_offset);
        for (std::size_t k = 0; k < absmax.size(); ++k)
            absmax[k] =
                nested_map[static_cast<std::size_t>(absmax[k])] * nested[(first / bs + k) / nb] + offset;
    }
    for (std::int64_t i = 0; i < b.n; ++i)
        for (std::int64_t j = 0; j < b.m; ++j) {
            const auto e = static_cast<std::size_t>((b.row0 + i) * q.cols + b.col0 + j);
            const std::uint8_t byte = bytes[e / 2];
            b.at(i, j) = map[(e % 2 == 0) ? (byte >> 4) : (byte & 0xF)] * absmax[e / bs - first / bs];
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
        case QuantScheme::strided:
            return "strided";
    }
    return "unknown";
}

TensorInfo decoded_matrix(std::string name, std::shared_ptr<const QuantizedWeight> q) {
    TensorInfo t;
    t.name = std::move(name);
    t.dtype = DType::F32;
    t.shape = {q->rows, q->cols};
    t.nbytes = static_cast<std::size_t>(q->rows * q->cols) * sizeof(float);
    t.file = MappedFile::generated(q->codes.path(), t.nbytes, [q](std::span<std::byte> out) {
        dequantize_block(*q, 0, q->rows, 0, q->cols, reinterpret_cast<float*>(out.data()));
    });
    t.quant = std::move(q);
    return t;
}

std::vector<const TensorInfo*> QuantizedWeight::parts() const {
    std::vector<const TensorInfo*> out{&codes};
    if (scale.file) out.push_back(&scale);  // a strided view has none
    for (const auto* o : {&zeros, &group_index, &global_scale, &quant_map, &nested_scale, &nested_map})
        if (*o) out.push_back(&**o);
    return out;
}

void dequantize_block(const QuantizedWeight& q, std::int64_t row0, std::int64_t n, std::int64_t col0,
                      std::int64_t m, float* out) {
    if (n <= 0 || m <= 0) return;
    const Block b{row0, n, col0, m, out};
    switch (q.scheme) {
        case QuantScheme::fp8:
        case QuantScheme::int8_row:
            return decode_scaled(q, b);
        case QuantScheme::mxfp4:
        case QuantScheme::nvfp4:
            return decode_fp4(q, b);
        case QuantScheme::packed_int:
            return decode_packed_int(q, b);
        case QuantScheme::gptq:
        case QuantScheme::awq:
            return decode_grouped(q, b);
        case QuantScheme::bnb_4bit:
            return decode_bnb_4bit(q, b);
        case QuantScheme::strided:
            return decode_strided(q, b);
    }
}

}  // namespace diffract
