#include "diffract/core/dtype.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace diffract {
namespace {

struct DTypeInfo {
    DType type;
    std::string_view name;
    std::size_t size;  // bytes per element, or per block
    bool is_float;
    std::size_t block = 1;  // elements per block
};

constexpr std::size_t kQK = 256;  // QK_K: elements per super-block of the K, IQ and TQ types

// Block sizes and bytes per block as ggml's type_traits (ggml.c) give them.
constexpr std::array<DTypeInfo, 38> kDTypes{{
    {DType::BOOL, "BOOL", 1, false},
    {DType::U8, "U8", 1, false},
    {DType::I8, "I8", 1, false},
    {DType::U16, "U16", 2, false},
    {DType::I16, "I16", 2, false},
    {DType::U32, "U32", 4, false},
    {DType::I32, "I32", 4, false},
    {DType::U64, "U64", 8, false},
    {DType::I64, "I64", 8, false},
    {DType::F8_E4M3, "F8_E4M3", 1, true},
    {DType::F8_E5M2, "F8_E5M2", 1, true},
    {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},
    {DType::F32, "F32", 4, true},
    {DType::F64, "F64", 8, true},
    {DType::Q8_0, "Q8_0", 2 + 32, true, 32},
    {DType::Q4_0, "Q4_0", 2 + 16, true, 32},
    {DType::Q4_1, "Q4_1", 2 + 2 + 16, true, 32},
    {DType::Q5_0, "Q5_0", 2 + 4 + 16, true, 32},
    {DType::Q5_1, "Q5_1", 2 + 2 + 4 + 16, true, 32},
    {DType::Q2_K, "Q2_K", kQK / 16 + kQK / 4 + 2 + 2, true, kQK},
    {DType::Q3_K, "Q3_K", kQK / 8 + kQK / 4 + 12 + 2, true, kQK},
    {DType::Q4_K, "Q4_K", 2 + 2 + 12 + kQK / 2, true, kQK},
    {DType::Q5_K, "Q5_K", 2 + 2 + 12 + kQK / 8 + kQK / 2, true, kQK},
    {DType::Q6_K, "Q6_K", kQK / 2 + kQK / 4 + kQK / 16 + 2, true, kQK},
    {DType::IQ2_XXS, "IQ2_XXS", 2 + kQK / 4, true, kQK},
    {DType::IQ2_XS, "IQ2_XS", 2 + kQK / 4 + kQK / 32, true, kQK},
    {DType::IQ2_S, "IQ2_S", 2 + kQK / 4 + kQK / 16, true, kQK},
    {DType::IQ3_XXS, "IQ3_XXS", 2 + kQK / 4 + kQK / 8, true, kQK},
    {DType::IQ3_S, "IQ3_S", 2 + kQK / 4 + kQK / 32 + kQK / 8 + kQK / 64, true, kQK},
    {DType::IQ1_S, "IQ1_S", 2 + kQK / 8 + kQK / 16, true, kQK},
    {DType::IQ1_M, "IQ1_M", kQK / 8 + kQK / 16 + kQK / 32, true, kQK},
    {DType::IQ4_NL, "IQ4_NL", 2 + 16, true, 32},
    {DType::IQ4_XS, "IQ4_XS", 2 + 2 + kQK / 64 + kQK / 2, true, kQK},
    {DType::TQ1_0, "TQ1_0", (kQK - 4 * kQK / 64) / 5 + kQK / 64 + 2, true, kQK},
    {DType::TQ2_0, "TQ2_0", kQK / 4 + 2, true, kQK},
    {DType::MXFP4, "MXFP4", 1 + 16, true, 32},
    {DType::NVFP4, "NVFP4", 4 + 32, true, 64},
}};

constexpr bool table_in_enum_order() {
    for (std::size_t i = 0; i < kDTypes.size(); ++i)
        if (static_cast<std::size_t>(kDTypes[i].type) != i) return false;
    return kDTypes.back().type == DType::NVFP4;
}
static_assert(table_in_enum_order(), "kDTypes must list every DType in enum order");

const DTypeInfo& info(DType t) { return kDTypes[static_cast<std::size_t>(t)]; }

template <typename T>
T load_unaligned(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// Decode tables for the 8-bit floats: 256 entries each, built once.
std::array<float, 256> make_f8_table(bool e4m3) {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) {
        const int sign = b >> 7;
        const int exp_bits = e4m3 ? 4 : 5;
        const int man_bits = 7 - exp_bits;
        const int bias = e4m3 ? 7 : 15;
        const int e = (b >> man_bits) & ((1 << exp_bits) - 1);
        const int m = b & ((1 << man_bits) - 1);
        float v;
        if (e4m3 && e == 15 && m == 7) {
            v = std::numeric_limits<float>::quiet_NaN();  // e4m3fn: no infinities, one NaN
        } else if (!e4m3 && e == 31) {
            v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
        } else if (e == 0) {
            v = std::ldexp(static_cast<float>(m), 1 - bias - man_bits);
        } else {
            v = std::ldexp(static_cast<float>(m + (1 << man_bits)), e - bias - man_bits);
        }
        t[b] = sign ? -v : v;
    }
    return t;
}

const std::array<float, 256>& f8_table(bool e4m3) {
    static const auto e4 = make_f8_table(true);
    static const auto e5 = make_f8_table(false);
    return e4m3 ? e4 : e5;
}

// Nearest 8-bit code, ties to the even code; saturates finite overflow to the largest finite value.
std::uint8_t f32_to_f8(float f, bool e4m3) {
    const auto& table = f8_table(e4m3);
    if (std::isnan(f)) return e4m3 ? 0x7F : 0x7F;
    const std::uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
    const float a = std::fabs(f);
    if (!e4m3 && std::isinf(f)) return sign | 0x7C;
    const int max_code = e4m3 ? 0x7E : 0x7B;  // largest finite positive code
    if (a >= table[max_code]) return sign | static_cast<std::uint8_t>(max_code);
    // Positive codes 0..max_code are increasing in value.
    int lo = 0;
    int hi = max_code;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        (table[mid] <= a ? lo : hi) = mid;
    }
    const float dlo = a - table[lo];
    const float dhi = table[hi] - a;
    int code = dlo < dhi ? lo : (dhi < dlo ? hi : ((lo & 1) == 0 ? lo : hi));
    return sign | static_cast<std::uint8_t>(code);
}

template <typename Out>
void convert_floats(const std::byte* src, DType t, std::size_t n, Out* dst) {
    switch (t) {
        case DType::F32:
            for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(load_unaligned<float>(src + 4 * i));
            return;
        case DType::F64:
            for (std::size_t i = 0; i < n; ++i)
                dst[i] = static_cast<Out>(load_unaligned<double>(src + 8 * i));
            return;
        case DType::BF16:
            // bf16 is the top half of an f32: a shift, which the compiler vectorises.
            for (std::size_t i = 0; i < n; ++i) {
                const auto h = load_unaligned<std::uint16_t>(src + 2 * i);
                dst[i] = static_cast<Out>(std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16));
            }
            return;
        case DType::F16:
            for (std::size_t i = 0; i < n; ++i)
                dst[i] = static_cast<Out>(f16_to_f32(load_unaligned<std::uint16_t>(src + 2 * i)));
            return;
        case DType::F8_E4M3:
        case DType::F8_E5M2: {
            const auto& table = f8_table(t == DType::F8_E4M3);
            for (std::size_t i = 0; i < n; ++i)
                dst[i] = static_cast<Out>(table[static_cast<std::uint8_t>(src[i])]);
            return;
        }
        default:
            throw std::invalid_argument("convert: dtype " + std::string(dtype_name(t)) +
                                        " is not a plain floating type");
    }
}

}  // namespace

std::size_t dtype_size(DType t) { return info(t).size; }
std::size_t dtype_block_size(DType t) { return info(t).block; }
bool dtype_is_block(DType t) { return info(t).block > 1; }

std::size_t dtype_bytes(DType t, std::size_t n) {
    const auto& d = info(t);
    if (n % d.block != 0)
        throw std::invalid_argument("dtype_bytes: " + std::to_string(n) + " elements of " +
                                    std::string(d.name) + " is not a multiple of the block size " +
                                    std::to_string(d.block));
    return n / d.block * d.size;
}
std::string_view dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) { return info(t).is_float; }

std::optional<DType> dtype_from_name(std::string_view name) {
    for (const auto& d : kDTypes) {
        if (d.name == name && d.block == 1) return d.type;
    }
    return std::nullopt;
}

float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

float f16_to_f32(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1Fu;
    const std::uint32_t man = h & 0x3FFu;
    if (exp == 0) {
        const float v = std::ldexp(static_cast<float>(man), -24);  // zero and subnormals
        return sign ? -v : v;
    }
    if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
    return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

float f8_e4m3_to_f32(std::uint8_t b) { return f8_table(true)[b]; }
float f8_e5m2_to_f32(std::uint8_t b) { return f8_table(false)[b]; }

std::uint16_t f32_to_bf16(float f) {
    std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<std::uint16_t>(x >> 16);
}

std::uint16_t f32_to_f16(float f) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return sign | 0x7E00u;
    if (ax >= 0x477FF000u) return sign | 0x7C00u;  // rounds past 65504: infinity
    if (ax < 0x38800000u) {
        // Result is subnormal (or zero): value / 2^-24, rounded to nearest even integer.
        const float a = std::bit_cast<float>(ax);
        const float scaled = a * 16777216.0f;  // exact: power of two
        return sign | static_cast<std::uint16_t>(std::nearbyint(scaled));
    }
    std::uint32_t r = ax - 0x38000000u;  // rebias exponent from 127 to 15
    r += 0xFFFu + ((r >> 13) & 1u);
    return sign | static_cast<std::uint16_t>(r >> 13);
}

void convert_to_f32(const std::byte* src, DType t, std::size_t n, float* dst) {
    convert_floats(src, t, n, dst);
}
void convert_to_f64(const std::byte* src, DType t, std::size_t n, double* dst) {
    convert_floats(src, t, n, dst);
}

void convert_from_f32(const float* src, DType t, std::size_t n, std::byte* dst) {
    switch (t) {
        case DType::F32:
            std::memcpy(dst, src, n * 4);
            return;
        case DType::F64:
            for (std::size_t i = 0; i < n; ++i) {
                const double d = src[i];
                std::memcpy(dst + 8 * i, &d, 8);
            }
            return;
        case DType::BF16:
            for (std::size_t i = 0; i < n; ++i) {
                const auto h = f32_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return;
        case DType::F16:
            for (std::size_t i = 0; i < n; ++i) {
                const auto h = f32_to_f16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return;
        case DType::F8_E4M3:
        case DType::F8_E5M2:
            for (std::size_t i = 0; i < n; ++i)
                dst[i] = static_cast<std::byte>(f32_to_f8(src[i], t == DType::F8_E4M3));
            return;
        default:
            throw std::invalid_argument("convert: cannot write dtype " + std::string(dtype_name(t)));
    }
}

}  // namespace diffract
