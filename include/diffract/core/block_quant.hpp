// Dequantisation of the GGUF (ggml) block-quantised dtypes into f32.
//
// Each type stores dtype_block_size(t) elements in dtype_size(t) bytes; a row of n elements (n a
// multiple of the block size) takes dtype_bytes(t, n) bytes. The decoders reproduce ggml's reference
// dequantisation (ggml-quants.c, and gguf-py's quants.py) value for value, each in f32 with the same
// order of operations, so a decoded value equals gguf.quants.dequantize's exactly.
//
//   family                 types                               block  values
//   legacy                 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0             32     d * q (+ m): f16 scale/min, 4-8 bit q
//   k-quants               Q2_K Q3_K Q4_K Q5_K Q6_K             256    f16 super-block scales, 6-8 bit
//                                                                      sub-block scales (and mins), 2-6 bit q
//   i-quants (grids)       IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S   256    f16 d, 4-bit sub-scales, codebook
//                          IQ1_S IQ1_M                                 indices into the ggml grids, signs
//   i-quants (non-linear)  IQ4_NL (32) IQ4_XS (256)                    d * kvalues_iq4nl[q]
//   ternary                TQ1_0 TQ2_0                          256    d * {-1, 0, 1}
//   fp4                    MXFP4 (32, e8m0 scale) NVFP4 (64, four ue4m3 scales) e2m1 values
//
// The grids and value tables are ggml format constants, generated into src/core/gguf_grids_impl.hpp
// by scripts/gen_gguf_grids.py. Untrusted bytes are safe to decode: every bit pattern is a value
// (NaN or Inf only where an f16 scale holds one).
#pragma once

#include <cstddef>

#include "diffract/core/dtype.hpp"

namespace diffract {

// Dequantises n elements of block type t at src (dtype_bytes(t, n) bytes, no alignment needed) into
// dst. Throws std::invalid_argument if t is not a block type or n is not a multiple of its block size.
void dequantize_blocks(const std::byte* src, DType t, std::size_t n, float* dst);

}  // namespace diffract
