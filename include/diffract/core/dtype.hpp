// Storage dtypes of checkpoint tensors and their conversion to f32/f64.
//
// Floating types are decoded exactly (bf16/f16/f8 widen without rounding); integer and bool
// tensors are read and reported but never analysed. GGUF block-quantised types (Q8_0) are
// dequantised by the GGUF reader into f32 and do not appear here.
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
    Q8_0,  // GGUF: blocks of 32 int8 with one f16 scale (34 bytes per block)
};

// Bytes per element; for Q8_0 the bytes of one 32-element block.
std::size_t dtype_size(DType t);
// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
bool dtype_is_float(DType t);

// Widen n elements of a floating dtype (not Q8_0) at src into dst. src needs no alignment.
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
