// What each tensor of a checkpoint is: its layer, its role in the transformer block, and, for
// attention projections, how it splits into heads.
//
// Families recognised (by config.json `architectures`/`model_type`, or GGUF `general.architecture`):
//   Llama, Mistral, Qwen2, OLMo, OLMo-2, Gemma, ... (separate q/k/v/o projections)
//   Phi-3 (fused qkv_proj [q; k; v] along rows, fused gate_up_proj [gate; up])
//   GPT-2 (Conv1D: weights stored transposed, [in, out]; fused c_attn along columns)
//   GPT-NeoX / Pythia (fused query_key_value, rows interleaved per head: [q_h; k_h; v_h] for each h)
//   BERT (query/key/value/attention.output.dense)
// Unknown architectures still load; their matrices are analysed whole, heads are not split.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/core/matrix.hpp"
#include "diffract/core/tensor.hpp"

namespace diffract::model {

enum class Role {
    attn_q,
    attn_k,
    attn_v,
    attn_o,
    attn_qkv,
    mlp_gate,
    mlp_up,
    mlp_down,
    mlp_gate_up,  // mlp_gate_up: Phi-3's fused [gate; up]
    embed,
    lm_head,
    norm,
    other,
};

std::string_view role_name(Role r);
std::optional<Role> role_from_name(std::string_view name);
bool role_is_attention(Role r);

// How a fused QKV projection lays out its heads.
enum class QkvLayout { separate, concatenated, interleaved_per_head };

struct HeadGeometry {
    int n_heads = 0;     // query heads
    int n_kv_heads = 0;  // key/value heads (GQA: n_heads is a multiple of it)
    int head_dim = 0;
    int hidden = 0;
    int group_size() const { return n_heads / n_kv_heads; }
    int kv_head_of(int query_head) const { return query_head / group_size(); }
};

struct ModelSchema {
    std::string architecture;  // e.g. "Olmo2ForCausalLM", or "unknown"
    std::string family;        // llama | phi3 | gpt2 | gpt_neox | bert | unknown
    std::optional<HeadGeometry> heads;
    QkvLayout qkv_layout = QkvLayout::separate;
    bool conv1d_transposed = false;  // GPT-2 stores [in, out]
    std::optional<int> num_layers;   // num_hidden_layers (+ num_nextn_predict_layers), when given
    std::vector<std::string> warnings;
};

struct TensorRole {
    std::optional<int> layer;
    Role role = Role::other;
    // A mixture-of-experts expert's index: the number after "experts" (Hugging Face) or after a
    // "*_exps" component (GGUF, and the per-expert names formats/packed_experts.hpp gives).
    std::optional<int> expert;
};

// Classifies one tensor name (HF or llama.cpp GGUF naming).
TensorRole classify_tensor(std::string_view name);

// Whether the name is one a quantization scheme gives the tensors beside a weight's codes (scales, zero
// points, group indices, absmax, activation and KV-cache scales: formats/quantized_safetensors.hpp).
// Such a tensor is never a matrix of any table, paired or not; its role is `other`.
bool is_quantization_part(std::string_view name);
// Of those, the ones no weight's values come from: activation and KV-cache scales, compressed-tensors'
// stored shapes, bitsandbytes' format tags. A quantized checkpoint's reader drops them.
bool is_quantization_side_tensor(std::string_view name);

// Every geometry value (config.json: num_attention_heads/n_head/num_heads/n_heads,
// num_key_value_heads/n_head_kv/num_kv_heads, hidden_size/n_embd/d_model, head_dim,
// num_hidden_layers/n_layer/num_layers/n_layers, intermediate_size/n_inner; GGUF: the same as
// <arch>.attention.head_count, ...) follows one rule: absent or null, or an integer in
// 1..kMaxGeometryValue. Anything else (0, negative, fractional, a string, a boolean, absurd) is an
// InputError "<label>: <what>: geometry must be a positive integer (expected 1..N, found V)".
inline constexpr int kMaxGeometryValue = 1 << 20;
std::optional<int> geometry_value(const nlohmann::json& value, std::string_view what,
                                  const std::string& label);

// Reads the family and head geometry from an HF config.json (or from GGUF metadata mapped into the
// same keys by the checkpoint opener). `config` may be null: the schema is then "unknown"; any other
// non-object is an InputError. For a recognised family every geometry key is validated
// (geometry_value), aliases must agree, and the head counts must divide (heads by kv heads, hidden
// size by heads when head_dim is absent); head_blocks checks them against each projection's shape.
ModelSchema schema_from_config(const nlohmann::json& config, const std::string& label = "config.json");

// One head's slice of an attention projection.
struct HeadBlock {
    int head = 0;              // query-head index for Q and O; KV-head index for K and V
    Role proj = Role::attn_q;  // attn_q | attn_k | attn_v | attn_o
    MatrixBlock block;
};

// The whole-matrix block of a 2-D tensor (transposed for GPT-2 Conv1D weights).
MatrixBlock whole_matrix(const ModelSchema& schema, const TensorInfo& t);

// The head blocks of an attention tensor; empty when heads are unknown or the role has none.
// Throws InputError naming the tensor when the geometry does not divide the projection.
std::vector<HeadBlock> head_blocks(const ModelSchema& schema, const TensorInfo& t, Role role);

}  // namespace diffract::model
