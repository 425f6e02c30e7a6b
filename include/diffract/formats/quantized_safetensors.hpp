// Quantized safetensors checkpoints read as their dense matrices (docs/formats/quantized.md).
//
// config.json's quantization_config names the scheme; each quantized weight is paired with the
// tensors the scheme defines for it, and the checkpoint then lists one logical matrix (F32, out × in,
// TensorInfo::quant) under the weight's Hugging Face name (`X.weight`, whatever the stored names:
// `X.qweight`, `X.weight_packed`, `X_blocks`). Scales, zero points, group indices, global scales and
// activation/KV-cache scales leave the tensor list: they are never matrices of any table.
//
//   quant_method / format                      tensors of X
//   fp8, fbgemm_fp8                            X.weight (F8), X.weight_scale_inv | X.weight_scale
//   compressed-tensors float-/int-quantized    X.weight (F8 | I8), X.weight_scale
//   compressed-tensors pack-quantized          X.weight_packed (I32), X.weight_shape, X.weight_scale[,
//   X.weight_g_idx] compressed-tensors nvfp4-pack-quantized    X.weight_packed (U8), X.weight_scale (F8),
//   X.weight_global_scale gptq                                       X.qweight, X.qzeros, X.scales[, X.g_idx]
//   awq (version gemm)                         X.qweight, X.qzeros, X.scales
//   bitsandbytes 4-bit (nf4, fp4)              X.weight (U8), X.weight.absmax, X.weight.quant_map,
//                                              X.weight.quant_state.bitsandbytes__*[, nested_absmax,
//                                              nested_quant_map]
//   bitsandbytes 8-bit (LLM.int8)              X.weight (I8), X.SCB
//   mxfp4 (gpt-oss experts)                    X_blocks (U8 [E, out, in/32, 16]), X_scales (U8 [E, out,
//   in/32])
// FP8 weights with scales and no config (a lone file) are paired by their names alone. A scheme that is
// not decoded leaves Checkpoint::undecoded_quantization set; a malformed pairing is an InputError
// naming the file, the tensor and what is wrong.
#pragma once

#include <string>

#include "diffract/formats/checkpoint.hpp"

namespace diffract::formats {

// Rewrites ck.tensors as described above; `label` names config.json in messages.
void read_quantized_weights(Checkpoint& ck, const std::string& label);

}  // namespace diffract::formats
