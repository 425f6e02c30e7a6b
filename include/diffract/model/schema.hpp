// What each tensor of a checkpoint is: its component (the language model or a tower), its layer, its
// role in the transformer block, its expert (mixture-of-experts layers), and, for attention
// projections, how it splits into heads.
//
// Architectures are read by their geometry, not by a list of names: a config.json (or its text_config,
// for a multimodal wrapper) that states the head count and the head width or hidden size has its
// attention split, whatever its model_type. Separate q/k/v/o projections are [heads × head_dim, hidden];
// a fused qkv is [q; k; v] along rows. The few real exceptions are a table in schema.cpp, each with
// its reason (GPT-2's Conv1D, GPT-NeoX's and BLOOM's per-head interleaving, Falcon's and InternLM2's
// groups, Qwen3-Next's gated query). Multi-head latent attention (DeepSeek-V2/V3, Kimi) is recognised
// by kv_lora_rank (docs/formats/mla.md). Towers (vision_config, audio_config) carry their own
// geometry; a tower whose geometry does not fit its tensors loses its heads, never the model.
// Unknown architectures still load; their matrices are analysed whole, heads are not split.
#pragma once

#include <map>
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
    // Multi-head latent attention's low-rank projections: q_a_proj (hidden -> q_lora_rank),
    // kv_a_proj_with_mqa (hidden -> kv_lora_rank + rope), kv_b_proj (kv_lora_rank -> heads × (k + v)).
    attn_q_a,
    attn_kv_a,
    attn_kv_b,
    router,              // a mixture-of-experts layer's router (mlp.gate, router, ffn_gate_inp)
    shared_expert_gate,  // Qwen-MoE's shared_expert_gate (ffn_gate_inp_shexp)
    other,
};

std::string_view role_name(Role r);
std::optional<Role> role_from_name(std::string_view name);
bool role_is_attention(Role r);
// An MLP's projections (gate, up, down, fused gate_up): an expert's matrices in a mixture of experts.
bool role_is_mlp_projection(Role r);

// What part of a model a tensor belongs to: the language model, or one of the towers a multimodal
// wrapper adds (vision, audio) and the projector that maps a tower into the language model. Aggregates,
// figures and rankings never pool components.
enum class Component { language, vision, audio, projector };
std::string_view component_name(Component c);
std::optional<Component> component_from_name(std::string_view name);

// A mixture-of-experts matrix is a routed expert (with an index) or a shared expert (always active).
enum class ExpertKind { none, routed, shared };
std::string_view expert_kind_name(ExpertKind k);  // "" | "routed" | "shared"

// How a fused QKV projection lays out its heads: [q; k; v] (concatenated), [q_h; k_h; v_h] head by head
// (interleaved_per_head: GPT-NeoX, BLOOM), or per key/value group [q × group; k; v] (grouped_by_kv:
// Falcon's new decoder, InternLM2).
enum class QkvLayout { separate, concatenated, interleaved_per_head, grouped_by_kv };

struct HeadGeometry {
    int n_heads = 0;     // query heads
    int n_kv_heads = 0;  // key/value heads (GQA: n_heads is a multiple of it)
    int head_dim = 0;    // a query (and key) head's width; MLA: qk_nope_head_dim + qk_rope_head_dim
    int hidden = 0;
    // Multi-head latent attention: the heads are rows of q_b_proj (or q_proj) and kv_b_proj, whose key
    // part is qk_nope_head_dim wide and value part v_head_dim; the output projection's columns are
    // heads × v_head_dim.
    bool latent = false;
    int qk_rope_head_dim = 0;
    int v_head_dim = 0;  // 0: head_dim
    int group_size() const { return n_heads / n_kv_heads; }
    int kv_head_of(int query_head) const { return query_head / group_size(); }
    int value_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
    int key_nope_dim() const { return head_dim - qk_rope_head_dim; }
    bool operator==(const HeadGeometry&) const = default;
};

// A tower's geometry (vision_config, audio_config): its heads when the config gives them, its layer
// count. Towers' fused qkv tensors are [q; k; v] along rows.
struct TowerSchema {
    std::optional<HeadGeometry> heads;
    std::optional<int> num_layers;
};

struct ModelSchema {
    std::string architecture;  // e.g. "Olmo2ForCausalLM", or "unknown"
    // standard | mla | an exception's name (gpt2, gpt_neox, bloom, falcon, internlm2, qwen3_next) | unknown
    std::string family;
    std::optional<HeadGeometry> heads;
    QkvLayout qkv_layout = QkvLayout::separate;
    bool conv1d_transposed = false;           // GPT-2 stores [in, out]
    std::optional<int> num_layers;            // num_hidden_layers (+ num_nextn_predict_layers), when given
    std::map<Component, TowerSchema> towers;  // vision, audio (from vision_config, audio_config)
    // Whether the model type is one whose attention layout diffract verified (schema.cpp): a config
    // that contradicts its tensors is then refused. Otherwise (split on the geometry alone) a mismatch
    // leaves the heads unsplit with a warning (check_head_geometry).
    bool geometry_verified = false;
    std::vector<std::string> warnings;

    // The head geometry of a component's attention (nullptr: heads are not split there).
    const HeadGeometry* heads_of(Component c) const;
};

struct TensorRole {
    std::optional<int> layer;
    Role role = Role::other;
    // A mixture-of-experts expert's index: the number after "experts" (Hugging Face) or after a
    // "*_exps" component (GGUF, and the per-expert names formats/packed_experts.hpp gives).
    std::optional<int> expert;
    ExpertKind expert_kind = ExpertKind::none;
    Component component = Component::language;
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

// Checks the head geometry against the attention tensors where a mismatch is not a refusal: every
// tower's, and the language model's when its architecture was split on its geometry alone
// (!geometry_verified). Such a component loses its heads (a warning naming the tensor and the
// mismatch), never the model; head_blocks refuses the rest.
void check_head_geometry(ModelSchema& schema, const std::vector<TensorInfo>& tensors);

// One head's slice of an attention projection.
struct HeadBlock {
    int head = 0;              // query-head index for Q and O; KV-head index for K and V
    Role proj = Role::attn_q;  // attn_q | attn_k | attn_v | attn_o
    MatrixBlock block;
};

// The whole-matrix block of a 2-D tensor (transposed for GPT-2 Conv1D weights).
MatrixBlock whole_matrix(const ModelSchema& schema, const TensorInfo& t);

// The head blocks of an attention tensor, by the geometry of the tensor's component; empty when heads
// are unknown or the role has none (an MLA down-projection). kv_b_proj gives each head's key and value
// blocks.
// Throws InputError naming the tensor when the geometry does not divide the projection.
std::vector<HeadBlock> head_blocks(const ModelSchema& schema, const TensorInfo& t, Role role);

}  // namespace diffract::model
