// One decoder per ggml block type, each decoding one block into dtype_block_size floats. The order of
// f32 operations follows gguf-py's quants.py (which follows ggml-quants.c), so results are identical.
#include "diffract/core/block_quant.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/gguf_grids_impl.hpp"

namespace diffract {
namespace {

namespace g = gguf_grids;
using u8 = std::uint8_t;
constexpr std::size_t kQK = 256;

float f16_at(const u8* p) {
    std::uint16_t h = 0;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}
std::uint16_t u16_at(const u8* p) {
    std::uint16_t v = 0;
    std::memcpy(&v, p, 2);
    return v;
}
std::uint32_t u32_at(const u8* p) {
    std::uint32_t v = 0;
    std::memcpy(&v, p, 4);
    return v;
}
float sign_bit(u8 bits, int j) { return (bits >> j) & 1u ? -1.0f : 1.0f; }

// ---- legacy: 32 elements, element j < 16 in the low nibble of qs[j], j >= 16 in the high nibble.

void q4_0(const u8* b, float* y) {
    const float d = f16_at(b);
    const u8* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
        y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
}

void q4_1(const u8* b, float* y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const u8* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
        y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
}

void q5_0(const u8* b, float* y) {
    const float d = f16_at(b);
    const std::uint32_t qh = u32_at(b + 2);
    const u8* qs = b + 6;
    for (int j = 0; j < 16; ++j) {
        const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * static_cast<float>(lo - 16);
        y[j + 16] = d * static_cast<float>(hi - 16);
    }
}

void q5_1(const u8* b, float* y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const std::uint32_t qh = u32_at(b + 4);
    const u8* qs = b + 8;
    for (int j = 0; j < 16; ++j) {
        const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * static_cast<float>(lo) + m;
        y[j + 16] = d * static_cast<float>(hi) + m;
    }
}

void q8_0(const u8* b, float* y) {
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

// ---- k-quants: 256 elements in 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 8 of 32 (Q4_K, Q5_K).

// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin. Element e = 128 h + 32 s + l
// holds bits 2s of qs[32 h + l].
void q2_k(const u8* b, float* y) {
    const u8* scales = b;
    const u8* qs = b + 16;
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (std::size_t e = 0; e < kQK; ++e) {
        const std::size_t h = e / 128, s = (e / 32) % 4, l = e % 32;
        const float q = static_cast<float>((qs[32 * h + l] >> (2 * s)) & 3);
        const float dl = d * static_cast<float>(scales[e / 16] & 0x0F);
        const float ml = dmin * static_cast<float>(scales[e / 16] >> 4);
        y[e] = dl * q - ml;
    }
}

// Q3_K: hmask[32], qs[64], 12 bytes of 6-bit scales, d. The high bit of element e = 32 k + l is bit k
// of hmask[l]; a clear bit subtracts 4.
void q3_k(const u8* b, float* y) {
    const u8* hmask = b;
    const u8* qs = b + 32;
    const u8* sc = b + 96;
    const float d = f16_at(b + 108);
    std::array<float, 16> dl{};
    for (std::size_t i = 0; i < 16; ++i) {
        const int low = (i < 8 ? sc[i] : sc[i - 8] >> 4) & 0x0F;
        const int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
        dl[i] = d * static_cast<float>(static_cast<std::int8_t>(static_cast<u8>(low | (high << 4))) - 32);
    }
    for (std::size_t e = 0; e < kQK; ++e) {
        const std::size_t h = e / 128, s = (e / 32) % 4, l = e % 32;
        const int ql = (qs[32 * h + l] >> (2 * s)) & 3;
        const int qh = ((hmask[l] >> (e / 32)) & 1) ^ 1;
        y[e] = dl[e / 16] * static_cast<float>(ql - (qh << 2));
    }
}

// The 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K from their 12 packed bytes.
void k_scale_min(const u8* s, std::size_t j, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 0x3F;
        m = s[j + 4] & 0x3F;
    } else {
        sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 2) & 0x30);
        m = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
    }
}

// Q4_K: d, dmin, scales[12], qs[128]. Sub-block j = 2 c + n takes nibble n of qs[32 c + l].
void q4_k(const u8* b, float* y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const u8* qs = b + 16;
    for (std::size_t j = 0; j < 8; ++j) {
        int sc = 0, m = 0;
        k_scale_min(b + 4, j, sc, m);
        const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(m);
        for (std::size_t l = 0; l < 32; ++l) {
            const int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
            y[32 * j + l] = dj * static_cast<float>(q) - mj;
        }
    }
}

// Q5_K: as Q4_K with qh[32] before qs: bit j of qh[l] is the fifth bit of element 32 j + l.
void q5_k(const u8* b, float* y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const u8* qh = b + 16;
    const u8* qs = b + 48;
    for (std::size_t j = 0; j < 8; ++j) {
        int sc = 0, m = 0;
        k_scale_min(b + 4, j, sc, m);
        const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(m);
        for (std::size_t l = 0; l < 32; ++l) {
            const int q = ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F) | (((qh[l] >> j) & 1) << 4);
            y[32 * j + l] = dj * static_cast<float>(q) - mj;
        }
    }
}

// Q6_K: ql[128], qh[64], int8 scales[16], d. Element e = 128 h + 64 n + k takes nibble n of
// ql[64 h + k]; element e = 128 h + 32 s + l takes bits 2s of qh[32 h + l] as its top two bits.
void q6_k(const u8* b, float* y) {
    const u8* ql = b;
    const u8* qh = b + 128;
    const u8* sc = b + 192;
    const float d = f16_at(b + 208);
    for (std::size_t e = 0; e < kQK; ++e) {
        const std::size_t h = e / 128, n = (e / 64) % 2, k = e % 64, s = (e / 32) % 4, l = e % 32;
        const int lo = (ql[64 * h + k] >> (4 * n)) & 0x0F;
        const int hi = (qh[32 * h + l] >> (2 * s)) & 3;
        const float dl = d * static_cast<float>(static_cast<std::int8_t>(sc[e / 16]));
        y[e] = dl * static_cast<float>((lo | (hi << 4)) - 32);
    }
}

// ---- i-quants with codebook grids.

// IQ2_XXS: d, then 8 groups of 32 as two u32: aux0 holds four grid indices (one per byte), aux1 four
// 7-bit sign indices (bits 7 l) and a 4-bit scale (bits 28..31).
void iq2_xxs(const u8* b, float* y) {
    const float d = f16_at(b);
    for (std::size_t ib = 0; ib < 8; ++ib) {
        const std::uint32_t aux0 = u32_at(b + 2 + 8 * ib), aux1 = u32_at(b + 6 + 8 * ib);
        const float db = d * (0.5f + static_cast<float>(aux1 >> 28)) * 0.25f;
        for (std::size_t l = 0; l < 4; ++l) {
            const u8* grid = &g::kIq2xxsGrid[8 * ((aux0 >> (8 * l)) & 0xFF)];
            const u8 signs = g::kKsignsIq2xs[(aux1 >> (7 * l)) & 0x7F];
            for (int j = 0; j < 8; ++j)
                y[32 * ib + 8 * l + static_cast<std::size_t>(j)] =
                    db * static_cast<float>(grid[j]) * sign_bit(signs, j);
        }
    }
}

// IQ2_XS: d, qs as 32 u16 (9-bit grid index, 7-bit sign index), scales[8] (two 4-bit per byte, one
// per 16 elements).
void iq2_xs(const u8* b, float* y) {
    const float d = f16_at(b);
    const u8* scales = b + 66;
    for (std::size_t k = 0; k < 32; ++k) {
        const std::uint16_t q = u16_at(b + 2 + 2 * k);
        const std::size_t gi = k / 2;
        const int s = (scales[gi / 2] >> (4 * (gi % 2))) & 0x0F;
        const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;
        const u8* grid = &g::kIq2xsGrid[8 * (q & 511u)];
        const u8 signs = g::kKsignsIq2xs[q >> 9];
        for (int j = 0; j < 8; ++j)
            y[8 * k + static_cast<std::size_t>(j)] = db * static_cast<float>(grid[j]) * sign_bit(signs, j);
    }
}

// IQ2_S: d, qs[32] (low 8 bits of the grid index), signs[32], qh[8] (2 high bits each), scales[8].
void iq2_s(const u8* b, float* y) {
    const float d = f16_at(b);
    const u8* qs = b + 2;
    const u8* signs = b + 34;
    const u8* qh = b + 66;
    const u8* scales = b + 74;
    for (std::size_t k = 0; k < 32; ++k) {
        const std::size_t idx = qs[k] | (((qh[k / 4] >> (2 * (k % 4))) & 3u) << 8);
        const std::size_t gi = k / 2;
        const int s = (scales[gi / 2] >> (4 * (gi % 2))) & 0x0F;
        const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;
        const u8* grid = &g::kIq2sGrid[8 * idx];
        for (int j = 0; j < 8; ++j)
            y[8 * k + static_cast<std::size_t>(j)] = db * static_cast<float>(grid[j]) * sign_bit(signs[k], j);
    }
}

// IQ3_XXS: d, qs[64] grid indices (4 values each), then 8 u32 with four 7-bit sign indices and a scale.
void iq3_xxs(const u8* b, float* y) {
    const float d = f16_at(b);
    const u8* qs = b + 2;
    for (std::size_t ib = 0; ib < 8; ++ib) {
        const std::uint32_t aux = u32_at(b + 66 + 4 * ib);
        const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
        for (std::size_t l = 0; l < 4; ++l) {
            const u8 signs = g::kKsignsIq2xs[(aux >> (7 * l)) & 0x7F];
            for (std::size_t j = 0; j < 8; ++j) {
                const u8* grid = &g::kIq3xxsGrid[4 * qs[8 * ib + 2 * l + j / 4]];
                y[32 * ib + 8 * l + j] =
                    db * static_cast<float>(grid[j % 4]) * sign_bit(signs, static_cast<int>(j));
            }
        }
    }
}

// IQ3_S: d, qs[64] (low 8 bits of the grid index), qh[8] (one high bit each), signs[32], scales[4].
void iq3_s(const u8* b, float* y) {
    const float d = f16_at(b);
    const u8* qs = b + 2;
    const u8* qh = b + 66;
    const u8* signs = b + 74;
    const u8* scales = b + 106;
    for (std::size_t e = 0; e < kQK; ++e) {
        const std::size_t k = e / 4, ib = e / 32;
        const std::size_t idx = qs[k] | (((qh[k / 8] >> (k % 8)) & 1u) << 8);
        const int s = (scales[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        const float db = d * static_cast<float>(1 + 2 * s);
        y[e] = db * static_cast<float>(g::kIq3sGrid[4 * idx + e % 4]) *
               sign_bit(signs[e / 8], static_cast<int>(e % 8));
    }
}

// IQ1_S: d, qs[32] (low 8 bits of 11-bit grid indices), qh as 8 u16: 3 high bits per index (bits
// 3 l), a 3-bit scale (bits 12..14) and the sign of the shift delta (bit 15).
void iq1_s(const u8* b, float* y) {
    constexpr float kDelta = 0.125f;
    const float d = f16_at(b);
    const u8* qs = b + 2;
    for (std::size_t ib = 0; ib < 8; ++ib) {
        const std::uint16_t qh = u16_at(b + 34 + 2 * ib);
        const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
        const float delta = (qh & 0x8000u) == 0 ? kDelta : -kDelta;
        for (std::size_t l = 0; l < 4; ++l) {
            const std::size_t idx = qs[4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
            for (std::size_t j = 0; j < 8; ++j)
                y[32 * ib + 8 * l + j] = dl * (static_cast<float>(g::kIq1sGrid[8 * idx + j]) + delta);
        }
    }
}

// IQ1_M: qs[32], qh[16] (per nibble: 3 high index bits and the delta sign), scales as 4 u16 holding
// sixteen 3-bit scales (bits 3 t) and, in their top nibbles, the f16 d.
void iq1_m(const u8* b, float* y) {
    constexpr float kDelta = 0.125f;
    const u8* qs = b;
    const u8* qh = b + 32;
    std::array<std::uint16_t, 4> sc{};
    for (std::size_t i = 0; i < 4; ++i) sc[i] = u16_at(b + 48 + 2 * i);
    const auto dbits = static_cast<std::uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0u) |
                                                  ((sc[2] >> 4) & 0x0F00u) | (sc[3] & 0xF000u));
    const float d = f16_to_f32(dbits);
    for (std::size_t k = 0; k < 32; ++k) {
        const int nib = (qh[k / 2] >> (4 * (k % 2))) & 0x0F;
        const std::size_t idx = qs[k] | (static_cast<std::size_t>(nib & 7) << 8);
        const float delta = (nib & 8) == 0 ? kDelta : -kDelta;
        const std::size_t m = k / 2;  // the 3-bit scale covers 16 elements
        const float dl = d * static_cast<float>(2 * ((sc[m / 4] >> (3 * (m % 4))) & 7) + 1);
        for (std::size_t j = 0; j < 8; ++j)
            y[8 * k + j] = dl * (static_cast<float>(g::kIq1sGrid[8 * idx + j]) + delta);
    }
}

// ---- i-quants with non-linear levels.

void iq4_nl(const u8* b, float* y) {
    const float d = f16_at(b);
    const u8* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(g::kValuesIq4nl[qs[j] & 0x0F]);
        y[j + 16] = d * static_cast<float>(g::kValuesIq4nl[qs[j] >> 4]);
    }
}

// IQ4_XS: d, scales_h (u16, 2 bits per sub-block), scales_l[4] (4 bits per sub-block), qs[128].
void iq4_xs(const u8* b, float* y) {
    const float d = f16_at(b);
    const std::uint16_t scales_h = u16_at(b + 2);
    const u8* scales_l = b + 4;
    const u8* qs = b + 8;
    for (std::size_t ib = 0; ib < 8; ++ib) {
        const int low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        const int high = (scales_h >> (2 * ib)) & 3;
        const float dl =
            d * static_cast<float>(static_cast<std::int8_t>(static_cast<u8>(low | (high << 4))) - 32);
        for (std::size_t j = 0; j < 16; ++j) {
            y[32 * ib + j] = dl * static_cast<float>(g::kValuesIq4nl[qs[16 * ib + j] & 0x0F]);
            y[32 * ib + 16 + j] = dl * static_cast<float>(g::kValuesIq4nl[qs[16 * ib + j] >> 4]);
        }
    }
}

// ---- ternary.

// TQ1_0: qs[48] and qh[4] pack five (qs) or four (qh) base-3 digits per byte as a fixed-point fraction;
// digit p of byte v is ((v * 3^p mod 256) * 3) >> 8. Then d.
void tq1_0(const u8* b, float* y) {
    constexpr std::array<unsigned, 5> kPow3{1, 3, 9, 27, 81};
    const float d = f16_at(b + 52);
    auto digit = [&](u8 v, std::size_t p) {
        const auto x = static_cast<u8>(v * kPow3[p]);
        return static_cast<float>(((static_cast<unsigned>(x) * 3u) >> 8) - 1.0f);
    };
    for (std::size_t p = 0; p < 5; ++p)
        for (std::size_t l = 0; l < 32; ++l) y[32 * p + l] = d * digit(b[l], p);
    for (std::size_t p = 0; p < 5; ++p)
        for (std::size_t l = 0; l < 16; ++l) y[160 + 16 * p + l] = d * digit(b[32 + l], p);
    for (std::size_t p = 0; p < 4; ++p)
        for (std::size_t l = 0; l < 4; ++l) y[240 + 4 * p + l] = d * digit(b[48 + l], p);
}

// TQ2_0: qs[64] with four 2-bit digits per byte (element 128 h + 32 s + l in bits 2s of qs[32 h + l]),
// then d.
void tq2_0(const u8* b, float* y) {
    const float d = f16_at(b + 64);
    for (std::size_t e = 0; e < kQK; ++e) {
        const std::size_t h = e / 128, s = (e / 32) % 4, l = e % 32;
        y[e] = d * static_cast<float>(((b[32 * h + l] >> (2 * s)) & 3) - 1);
    }
}

// ---- fp4.

// MXFP4: an e8m0 exponent e (scale 2^(e - 127), halved as ggml_e8m0_to_fp32_half does because the
// e2m1 levels are doubled), then 16 bytes of two e2m1 codes.
void mxfp4(const u8* b, float* y) {
    const std::uint32_t e = b[0];
    const float d = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(g::kValuesMxfp4[b[1 + j] & 0x0F]);
        y[j + 16] = d * static_cast<float>(g::kValuesMxfp4[b[1 + j] >> 4]);
    }
}

// An unsigned e4m3 scale of NVFP4 (bias 7, bit 7 ignored, 0x00 and 0x7F read as zero), halved.
float ue4m3_half(u8 x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int exp = (x >> 3) & 0x0F;
    const int man = x & 7;
    const float raw = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                               : std::ldexp(static_cast<float>(8 + man), exp - 7 - 3);
    return raw * 0.5f;
}

// NVFP4: four ue4m3 scales, then 4 x 8 bytes of e2m1 codes: sub-block s has 16 values, the low nibbles
// of its 8 bytes then the high nibbles.
void nvfp4(const u8* b, float* y) {
    for (std::size_t s = 0; s < 4; ++s) {
        const float d = ue4m3_half(b[s]);
        const u8* qs = b + 4 + 8 * s;
        for (std::size_t k = 0; k < 8; ++k) {
            y[16 * s + k] = d * static_cast<float>(g::kValuesMxfp4[qs[k] & 0x0F]);
            y[16 * s + 8 + k] = d * static_cast<float>(g::kValuesMxfp4[qs[k] >> 4]);
        }
    }
}

using BlockDecoder = void (*)(const u8*, float*);

struct Decoder {
    DType type;
    BlockDecoder decode;
};

constexpr std::array<Decoder, 23> kDecoders{{
    {DType::Q8_0, q8_0},   {DType::Q4_0, q4_0},       {DType::Q4_1, q4_1},       {DType::Q5_0, q5_0},
    {DType::Q5_1, q5_1},   {DType::Q2_K, q2_k},       {DType::Q3_K, q3_k},       {DType::Q4_K, q4_k},
    {DType::Q5_K, q5_k},   {DType::Q6_K, q6_k},       {DType::IQ2_XXS, iq2_xxs}, {DType::IQ2_XS, iq2_xs},
    {DType::IQ2_S, iq2_s}, {DType::IQ3_XXS, iq3_xxs}, {DType::IQ3_S, iq3_s},     {DType::IQ1_S, iq1_s},
    {DType::IQ1_M, iq1_m}, {DType::IQ4_NL, iq4_nl},   {DType::IQ4_XS, iq4_xs},   {DType::TQ1_0, tq1_0},
    {DType::TQ2_0, tq2_0}, {DType::MXFP4, mxfp4},     {DType::NVFP4, nvfp4},
}};

BlockDecoder decoder_of(DType t) {
    for (const auto& d : kDecoders)
        if (d.type == t) return d.decode;
    return nullptr;
}

}  // namespace

void dequantize_blocks(const std::byte* src, DType t, std::size_t n, float* dst) {
    const BlockDecoder decode = decoder_of(t);
    if (decode == nullptr)
        throw std::invalid_argument("dequantize_blocks: " + std::string(dtype_name(t)) +
                                    " is not a block-quantised dtype");
    const std::size_t block = dtype_block_size(t), bytes = dtype_size(t);
    if (n % block != 0)
        throw std::invalid_argument("dequantize_blocks: " + std::to_string(n) + " elements of " +
                                    std::string(dtype_name(t)) + " is not a multiple of " +
                                    std::to_string(block));
    const auto* p = reinterpret_cast<const u8*>(src);
    for (std::size_t i = 0; i < n / block; ++i) decode(p + i * bytes, dst + i * block);
}

}  // namespace diffract
