// Storage dtypes of checkpoint tensors and their conversion to f32/f64.
//
// Floating types are decoded exactly (bf16/f16/f8 widen without rounding); integer and bool
// tensors are read and reported but never analysed. The GGUF block-quantised types (Q8_0 ... NVFP4)
// store elements in blocks: dtype_block_size elements in dtype_size bytes, dequantised to f32 by
// core/block_quant.hpp exactly as ggml does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace diffract {

enum class DType : std::uint8_t {
    BOOL,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F8_E4M3,
    F8_E5M2,
    F16,
    BF16,
    F32,
    F64,
    // GGUF (ggml) block-quantised types; block layouts in core/block_quant.hpp.
    Q8_0,  // blocks of 32 int8 with one f16 scale (34 bytes per block)
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ2_XXS,
    IQ2_XS,
    IQ2_S,
    IQ3_XXS,
    IQ3_S,
    IQ1_S,
    IQ1_M,
    IQ4_NL,
    IQ4_XS,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
};

// Bytes per element; for a block-quantised type the bytes of one block of dtype_block_size elements.
std::size_t dtype_size(DType t);
// Elements per block: 1 for plain types, e.g. 32 for Q8_0 and 256 for the K and IQ types.
std::size_t dtype_block_size(DType t);
// True for the GGUF block-quantised types (dtype_block_size > 1).
bool dtype_is_block(DType t);
// Bytes of n elements (n a multiple of dtype_block_size, else std::invalid_argument).
std::size_t dtype_bytes(DType t, std::size_t n);
// The safetensors spelling ("BF16", "F8_E4M3", ...); the ggml spelling for block types ("Q4_K").
std::string_view dtype_name(DType t);
// Safetensors dtypes only: block-quantised names give nullopt.
std::optional<DType> dtype_from_name(std::string_view name);
bool dtype_is_float(DType t);

// Widen n elements of a plain floating dtype (not a block type) at src into dst. src needs no alignment.
void convert_to_f32(const std::byte* src, DType t, std::size_t n, float* dst);
void convert_to_f64(const std::byte* src, DType t, std::size_t n, double* dst);

// Narrow f32 to a storage dtype, round-to-nearest-even for bf16/f16/f8 (saturating f8 to its max
// finite value, as torch does for e4m3fn). dst receives n * dtype_size(t) bytes.
void convert_from_f32(const float* src, DType t, std::size_t n, std::byte* dst);

// Scalar decoders, exposed for tests.
float bf16_to_f32(std::uint16_t h);
float f16_to_f32(std::uint16_t h);
float f8_e4m3_to_f32(std::uint8_t b);
float f8_e5m2_to_f32(std::uint8_t b);
std::uint16_t f32_to_bf16(float f);
std::uint16_t f32_to_f16(float f);

}  // namespace diffract
