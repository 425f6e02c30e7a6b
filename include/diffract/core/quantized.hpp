// A weight matrix stored quantized in safetensors: the tensor of its codes and the tensors that give
// the codes their values (scales, zero points, group indices, a global scale), read as one logical
// out × in matrix and decoded to the dense values the reference loaders produce (transformers'
// quantizer integrations, compressed-tensors, bitsandbytes). The pairing of tensors by a checkpoint's
// quantization_config lives in formats/quantized_safetensors.hpp; this is the arithmetic.
//
//   scheme      codes                    value of logical element (r, c)
//   fp8         F8/I8 [out, in]          code · scale[r / block_rows, c / block_cols]
//   int8_row    I8 [out, in]             code · SCB[r] / 127 (LLM.int8)
//   mxfp4       U8 [out, in/32, 16]      e2m1 (low nibble first) · 2^(e8m0 − 127), per 32
//   nvfp4       U8 [out, in/2]           e2m1 (low nibble first) · f8 scale / global, per 16
//   packed_int  I32 [out, in·bits/32]    (field − 2^(bits−1)) · scale[r, group(c)]
//   gptq        I32 [in·bits/32, out]    (field − zero[group(c), r]) · scales[group(c), r]
//   awq         I32 [in, out/8]          (nibble − zero[group(c), r]) · scales[group(c), r]
//   bnb_4bit    U8 [out·in/2]            quant_map[nibble] (high first) · absmax[(r·in + c) / blocksize]
//   strided     a floating slice         element first + r · row_stride + c · col_stride
// `bits`-wide fields are a little-endian bit stream through consecutive 32-bit words (GPTQ's 3 bits
// cross word boundaries); AWQ orders the eight nibbles of a word 0 2 4 6 1 3 5 7.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diffract/core/tensor.hpp"

namespace diffract {

// `strided` is no quantization: a plain floating matrix read through strides, for one expert of a packed
// tensor stored transposed or interleaved (gpt-oss, Llama 4: formats/packed_experts.hpp).
enum class QuantScheme : std::uint8_t {
    fp8,
    int8_row,
    mxfp4,
    nvfp4,
    packed_int,
    gptq,
    awq,
    bnb_4bit,
    strided
};

struct QuantizedWeight {
    QuantScheme scheme = QuantScheme::fp8;
    std::string description;          // what inspect shows: "fp8 e4m3, block 128×128", "gptq int4 group 128"
    std::int64_t rows = 0, cols = 0;  // the logical matrix, out × in
    TensorInfo codes;                 // the stored codes (already sliced to one matrix for packed experts)
    TensorInfo scale;                 // scales; bnb: absmax; LLM.int8: SCB
    std::optional<TensorInfo> zeros;  // GPTQ/AWQ qzeros
    std::optional<TensorInfo> group_index;               // GPTQ g_idx, compressed-tensors weight_g_idx
    std::optional<TensorInfo> global_scale;              // NVFP4
    std::optional<TensorInfo> quant_map;                 // bnb: the 16 code values
    std::optional<TensorInfo> nested_scale, nested_map;  // bnb double quantization of absmax
    int bits = 0;
    // fp8: the region one scale covers (rows × cols of the logical matrix); group schemes: block_cols
    // is the group size along the input dimension (the whole row when it equals cols).
    std::int64_t block_rows = 1, block_cols = 1;
    std::int64_t blocksize = 0, nested_blocksize = 0;  // bnb
    double nested_offset = 0;                          // bnb
    bool zero_minus_one = false;                       // GPTQ v1 stores each zero point less one
    // mxfp4: logical row r is stored row row_first + r · row_step (gpt-oss interleaves gate and up).
    std::int64_t row_first = 0, row_step = 1;
    // strided: logical element (r, c) is element first + r · row_stride + c · col_stride of `codes`.
    std::int64_t first = 0, row_stride = 0, col_stride = 0;
    // The tensors the values are computed from, for content ids and for shipping a run's inputs.
    std::vector<const TensorInfo*> parts() const;
};

// The logical F32 matrix `name` decoded from `q`: read_matrix decodes its blocks from the parts; its
// bytes, when a reader needs them whole (an edit, a device upload), are computed on demand.
TensorInfo decoded_matrix(std::string name, std::shared_ptr<const QuantizedWeight> q);

// The scheme's name as inspect and the docs spell it ("fp8", "gptq", ...).
std::string_view quant_scheme_name(QuantScheme s);

// Decodes the block of logical rows [row0, row0 + n) and columns [col0, col0 + m) into out (n × m,
// row-major f32), reading only the codes, scales and zero points of that block (a head's columns of
// an output projection decode a slice, not the matrix). The pairing validated every shape and dtype
// (formats/quantized_safetensors.cpp), so this indexes without checks.
void dequantize_block(const QuantizedWeight& q, std::int64_t row0, std::int64_t n, std::int64_t col0,
                      std::int64_t m, float* out);

}  // namespace diffract
