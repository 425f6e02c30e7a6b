// Mixture-of-experts tensors that pack every expert of a layer into one tensor, read as one matrix per
// expert (docs/formats/moe.md). Each expert's matrix is a view of the mapped file (never a copy of the
// packed tensor), named as the per-expert layouts name it, so that its layer, role and expert index come
// from the name as for Mixtral or Qwen-MoE checkpoints saved per expert:
//
//   layout                         stored                                   per expert e
//   transformers v5                X.experts.gate_up_proj [E, 2I, H]        X.experts.e.gate_proj.weight =
//   rows [0, I)
//                                  X.experts.down_proj    [E, H, I]           up_proj = rows [I, 2I);
//                                  down_proj
//   gpt-oss (bf16)                 X.experts.gate_up_proj [E, H, 2I] (x @ W) gate = columns 0, 2, 4, …
//   (transposed),
//                                  X.experts.down_proj    [E, I, H]           up = columns 1, 3, …; biases
//                                  [E, ·] split
//   Llama 4                        X.experts.gate_up_proj [E, H, 2I] (x @ W) gate = columns [0, I), up = [I,
//   2I)
//                                  X.experts.down_proj    [E, I, H]
//   GGUF                           blk.N.ffn_{gate,up,down}_exps [E, out, in] blk.N.ffn_gate_exps.e.weight,
//   ...
// gpt-oss's MXFP4 experts are split the same way by the quantized reader. The orientation of a
// transformers tensor comes from the architecture (gpt_oss and llama4 store x @ W) and is checked
// against hidden_size when the config gives it.
#pragma once

#include <string>

#include "diffract/formats/checkpoint.hpp"

namespace diffract::formats {

// Replaces every packed expert tensor of ck.tensors by its experts' matrices (counted in
// ck.packed_experts). Throws InputError for a packed tensor whose orientation its shape contradicts.
void split_packed_experts(Checkpoint& ck);

}  // namespace diffract::formats
