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
};

inline constexpr std::uint32_t kQK_K = 256;

// Ids 4 and 5 (Q4_2, Q4_3) were removed from ggml before GGUF existed and are unknown here. Ids 31-33
// and 36-38 are the repacked Q4_0 / IQ4_NL variants that ggml briefly stored in files; they are kept
// so that such files still open (their tensors are reported, not decoded).
inline constexpr std::array<GgmlType, 40> kGgmlTypes{{
    {0, "F32", 1, 4, DType::F32},
    {1, "F16", 1, 2, DType::F16},
    {2, "Q4_0", 32, 2 + 16, std::nullopt},
    {3, "Q4_1", 32, 2 + 2 + 16, std::nullopt},
    {6, "Q5_0", 32, 2 + 4 + 16, std::nullopt},
    {7, "Q5_1", 32, 2 + 2 + 4 + 16, std::nullopt},
    {8, "Q8_0", 32, 2 + 32, DType::Q8_0},
    {9, "Q8_1", 32, 2 + 2 + 32, std::nullopt},  // f16 d and s (gguf-py still says 4 + 4 + 32, stale)
    {10, "Q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4, std::nullopt},
    {11, "Q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12, std::nullopt},
    {12, "Q4_K", kQK_K, 2 + 2 + kQK_K / 2 + 12, std::nullopt},
    {13, "Q5_K", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 8 + 12, std::nullopt},
    {14, "Q6_K", kQK_K, 2 + kQK_K / 2 + kQK_K / 4 + kQK_K / 16, std::nullopt},
    {15, "Q8_K", kQK_K, 4 + kQK_K + kQK_K / 8, std::nullopt},
    {16, "IQ2_XXS", kQK_K, 2 + kQK_K / 4, std::nullopt},
    {17, "IQ2_XS", kQK_K, 2 + kQK_K / 4 + kQK_K / 32, std::nullopt},
    {18, "IQ3_XXS", kQK_K, 2 + kQK_K / 4 + kQK_K / 8, std::nullopt},
    {19, "IQ1_S", kQK_K, 2 + kQK_K / 8 + kQK_K / 16, std::nullopt},
    {20, "IQ4_NL", 32, 2 + 16, std::nullopt},
    {21, "IQ3_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4, std::nullopt},
    {22, "IQ2_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 16, std::nullopt},
    {23, "IQ4_XS", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64, std::nullopt},
    {24, "I8", 1, 1, DType::I8},
    {25, "I16", 1, 2, DType::I16},
    {26, "I32", 1, 4, DType::I32},
    {27, "I64", 1, 8, DType::I64},
    {28, "F64", 1, 8, DType::F64},
    {29, "IQ1_M", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32, std::nullopt},
    {30, "BF16", 1, 2, DType::BF16},
    {31, "Q4_0_4_4", 32, 2 + 16, std::nullopt},
    {32, "Q4_0_4_8", 32, 2 + 16, std::nullopt},
    {33, "Q4_0_8_8", 32, 2 + 16, std::nullopt},
    {34, "TQ1_0", kQK_K, 2 + 4 * 13, std::nullopt},
    {35, "TQ2_0", kQK_K, 2 + 64, std::nullopt},
    {36, "IQ4_NL_4_4", 32, 2 + 16, std::nullopt},
    {37, "IQ4_NL_4_8", 32, 2 + 16, std::nullopt},
    {38, "IQ4_NL_8_8", 32, 2 + 16, std::nullopt},
    {39, "MXFP4", 32, 1 + 16, std::nullopt},
    {40, "NVFP4", 64, 4 + 32, std::nullopt},
    {41, "Q1_0", 128, 2 + 16, std::nullopt},
}};

inline const GgmlType* find_ggml_type(std::uint32_t id) {
    for (const auto& t : kGgmlTypes) {
        if (t.id == id) return &t;
    }
    return nullptr;
}

}  // namespace diffract::formats::gguf_detail
