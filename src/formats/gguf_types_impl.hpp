// The ggml tensor type table (ggml.c type_traits / gguf-py GGML_QUANT_SIZES): for each type id its
// name, block size (elements per block) and type size (bytes per block). A tensor of n elements
// (n a multiple of the block size, per row) takes n / block_size * type_size bytes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "diffract/core/dtype.hpp"

namespace diffract::formats::gguf_detail {

struct GgmlType {
    std::uint32_t id;
    std::string_view name;
    std::uint32_t block_size;
    std::uint32_t type_size;
    std::optional<DType> dtype;  // how diffract stores it; nullopt: listed but not decoded
    // Every type that gguf-py can dequantise is decoded (core/block_quant.hpp). Q8_1 and Q8_K (ggml's
    // intermediate types for dot products, never written by the converter) and the repacked variants
    // are not: gguf-py has no reference decoder for them.
};

inline constexpr std::uint32_t kQK_K = 256;

// Ids 4 and 5 (Q4_2, Q4_3) were removed from ggml before GGUF existed and are unknown here. Ids 31-33
// and 36-38 are the repacked Q4_0 / IQ4_NL variants that ggml briefly stored in files; they are kept
// so that such files still open (their tensors are reported, not decoded).
inline constexpr std::array<GgmlType, 40> kGgmlTypes{{
    {0, "F32", 1, 4, DType::F32},
    {1, "F16", 1, 2, DType::F16},
    {2, "Q4_0", 32, 2 + 16, DType::Q4_0},
    {3, "Q4_1", 32, 2 + 2 + 16, DType::Q4_1},
    {6, "Q5_0", 32, 2 + 4 + 16, DType::Q5_0},
    {7, "Q5_1", 32, 2 + 2 + 4 + 16, DType::Q5_1},
    {8, "Q8_0", 32, 2 + 32, DType::Q8_0},
    {9, "Q8_1", 32, 2 + 2 + 32, std::nullopt},  // f16 d and s (gguf-py still says 4 + 4 + 32, stale)
    {10, "Q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4, DType::Q2_K},
    {11, "Q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12, DType::Q3_K},
    {12, "Q4_K", kQK_K, 2 + 2 + kQK_K / 2 + 12, DType::Q4_K},
    {13, "Q5_K", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 8 + 12, DType::Q5_K},
    {14, "Q6_K", kQK_K, 2 + kQK_K / 2 + kQK_K / 4 + kQK_K / 16, DType::Q6_K},
    {15, "Q8_K", kQK_K, 4 + kQK_K + kQK_K / 8, std::nullopt},
    {16, "IQ2_XXS", kQK_K, 2 + kQK_K / 4, DType::IQ2_XXS},
    {17, "IQ2_XS", kQK_K, 2 + kQK_K / 4 + kQK_K / 32, DType::IQ2_XS},
    {18, "IQ3_XXS", kQK_K, 2 + kQK_K / 4 + kQK_K / 8, DType::IQ3_XXS},
    {19, "IQ1_S", kQK_K, 2 + kQK_K / 8 + kQK_K / 16, DType::IQ1_S},
    {20, "IQ4_NL", 32, 2 + 16, DType::IQ4_NL},
    {21, "IQ3_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4, DType::IQ3_S},
    {22, "IQ2_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 16, DType::IQ2_S},
    {23, "IQ4_XS", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64, DType::IQ4_XS},
    {24, "I8", 1, 1, DType::I8},
    {25, "I16", 1, 2, DType::I16},
    {26, "I32", 1, 4, DType::I32},
    {27, "I64", 1, 8, DType::I64},
    {28, "F64", 1, 8, DType::F64},
    {29, "IQ1_M", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32, DType::IQ1_M},
    {30, "BF16", 1, 2, DType::BF16},
    {31, "Q4_0_4_4", 32, 2 + 16, std::nullopt},
    {32, "Q4_0_4_8", 32, 2 + 16, std::nullopt},
    {33, "Q4_0_8_8", 32, 2 + 16, std::nullopt},
    {34, "TQ1_0", kQK_K, 2 + 4 * 13, DType::TQ1_0},
    {35, "TQ2_0", kQK_K, 2 + 64, DType::TQ2_0},
    {36, "IQ4_NL_4_4", 32, 2 + 16, std::nullopt},
    {37, "IQ4_NL_4_8", 32, 2 + 16, std::nullopt},
    {38, "IQ4_NL_8_8", 32, 2 + 16, std::nullopt},
    {39, "MXFP4", 32, 1 + 16, DType::MXFP4},
    {40, "NVFP4", 64, 4 + 32, DType::NVFP4},
    {41, "Q1_0", 128, 2 + 16, std::nullopt},
}};

inline const GgmlType* find_ggml_type(std::uint32_t id) {
    for (const auto& t : kGgmlTypes) {
        if (t.id == id) return &t;
    }
    return nullptr;
}

}  // namespace diffract::formats::gguf_detail
