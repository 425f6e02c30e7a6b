// Tensor names, Hugging Face and llama.cpp GGUF alike, as the schema reads them: component, layer, role
// and expert.
#include <algorithm>
#include <array>
#include <charconv>

#include "diffract/model/schema.hpp"

namespace diffract::model {
namespace {

constexpr std::array<std::string_view, 18> kRoleNames{"attn_q",
                                                      "attn_k",
                                                      "attn_v",
                                                      "attn_o",
                                                      "attn_qkv",
                                                      "mlp_gate",
                                                      "mlp_up",
                                                      "mlp_down",
                                                      "mlp_gate_up",
                                                      "embed",
                                                      "lm_head",
                                                      "norm",
                                                      "attn_q_a",
                                                      "attn_kv_a",
                                                      "attn_kv_b",
                                                      "router",
                                                      "shared_expert_gate",
                                                      "other"};
static_assert(kRoleNames.size() == static_cast<std::size_t>(Role::other) + 1);

constexpr std::array<std::string_view, 4> kComponentNames{"language", "vision", "audio", "projector"};
constexpr std::array<std::string_view, 3> kExpertKindNames{"", "routed", "shared"};

using Parts = std::vector<std::string_view>;

Parts split_dots(std::string_view s) {
    Parts out;
    std::size_t start = 0;
    while (true) {
        const auto dot = s.find('.', start);
        out.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    return out;
}

std::optional<int> parse_int(std::string_view s) {
    int v = 0;
    if (s.empty()) return std::nullopt;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
}

bool has(const Parts& comps, std::string_view c) {
    return std::find(comps.begin(), comps.end(), c) != comps.end();
}

bool has_any(const Parts& comps, std::initializer_list<std::string_view> names) {
    return std::any_of(names.begin(), names.end(), [&](auto n) { return has(comps, n); });
}

// Component `a` immediately followed by `b`.
bool has_pair(const Parts& comps, std::string_view a, std::string_view b) {
    for (std::size_t i = 0; i + 1 < comps.size(); ++i)
        if (comps[i] == a && comps[i + 1] == b) return true;
    return false;
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

// The towers' and projectors' module names in the multimodal wrappers (Gemma 3, Llama 4, Qwen2.5-VL,
// LLaVA, Mistral Small 3.1, Qwen2-Audio, CLIP), and llama.cpp's mmproj prefixes (v., a., mm.).
Component component_of(const Parts& c) {
    if (has_any(c, {"multi_modal_projector", "mm_projector", "mm_input_projection", "embed_vision",
                    "embed_audio", "connector", "audio_projector"}) ||
        (!c.empty() && c[0] == "mm"))
        return Component::projector;
    if (has_any(c, {"vision_tower", "vision_model", "visual", "vision_encoder", "image_encoder", "vision"}) ||
        (c.size() > 1 && c[0] == "v"))
        return Component::vision;
    if (has_any(c, {"audio_tower", "audio_model", "audio_encoder", "audio"}) || (c.size() > 1 && c[0] == "a"))
        return Component::audio;
    return Component::language;
}

// A GGUF shared expert's component without its suffix ("ffn_gate_shexp" -> "ffn_gate").
std::string_view without_shexp(std::string_view part) {
    constexpr std::string_view kSuffix = "_shexp";
    return part.ends_with(kSuffix) && part != "ffn_gate_inp_shexp"
               ? part.substr(0, part.size() - kSuffix.size())
               : part;
}

Role classify_role(const Parts& c, bool in_layer) {
    for (auto part : c) {
        const auto l = lower(part);
        if (l.find("norm") != std::string::npos || l.starts_with("ln_") || l == "ln") return Role::norm;
    }
    // Routers, before the gate projections whose names they resemble: a MoE block's `gate` (Mixtral,
    // Qwen-MoE, OLMoE, DeepSeek), `router` (gpt-oss, Llama 4, Granite), GGUF's ffn_gate_inp.
    if (has_any(c, {"shared_expert_gate", "ffn_gate_inp_shexp"})) return Role::shared_expert_gate;
    if (has_any(c, {"router", "ffn_gate_inp"}) || has_pair(c, "mlp", "gate") ||
        has_pair(c, "block_sparse_moe", "gate") || has_pair(c, "feed_forward", "gate") ||
        has_pair(c, "moe", "gate"))
        return Role::router;
    // GGUF's packed experts, split per expert (formats/packed_experts.hpp).
    if (has(c, "ffn_gate_up_exps"))
        return has(c, "gate") ? Role::mlp_gate : (has(c, "up") ? Role::mlp_up : Role::mlp_gate_up);
    if (has(c, "ffn_gate_exps")) return Role::mlp_gate;
    if (has(c, "ffn_up_exps")) return Role::mlp_up;
    if (has(c, "ffn_down_exps")) return Role::mlp_down;
    // Multi-head latent attention (DeepSeek-V2/V3; GGUF attn_q_a, attn_q_b, attn_kv_a_mqa, attn_kv_b).
    if (has_any(c, {"q_a_proj", "attn_q_a"})) return Role::attn_q_a;
    if (has_any(c, {"q_b_proj", "attn_q_b"})) return Role::attn_q;
    if (has_any(c, {"kv_a_proj_with_mqa", "attn_kv_a_mqa"})) return Role::attn_kv_a;
    if (has_any(c, {"kv_b_proj", "attn_kv_b"})) return Role::attn_kv_b;
    // Fused projections first: their names contain the separate ones' substrings.
    if (has_any(c, {"qkv_proj", "c_attn", "query_key_value", "attn_qkv", "Wqkv", "wqkv"}) ||
        has_pair(c, "attn", "qkv"))
        return Role::attn_qkv;
    if (has(c, "gate_up_proj")) return Role::mlp_gate_up;
    // T5: the feed-forward's wi/wo (wo is not an attention output there), and attention's bare q/k/v/o.
    if (has(c, "DenseReluDense")) {
        if (has(c, "wi_0")) return Role::mlp_gate;
        if (has(c, "wi") || has(c, "wi_1")) return Role::mlp_up;
        if (has(c, "wo")) return Role::mlp_down;
    }
    if (has(c, "SelfAttention") || has(c, "EncDecAttention")) {
        if (has(c, "q")) return Role::attn_q;
        if (has(c, "k")) return Role::attn_k;
        if (has(c, "v")) return Role::attn_v;
        if (has(c, "o")) return Role::attn_o;
    }
    if (has_any(c, {"q_proj", "query", "attn_q", "wq"})) return Role::attn_q;
    if (has_any(c, {"k_proj", "key", "attn_k", "wk"})) return Role::attn_k;
    if (has_any(c, {"v_proj", "value", "attn_v", "wv"})) return Role::attn_v;
    if (has_any(c, {"o_proj", "attn_output", "out_proj", "wo"}) || has_pair(c, "attn", "c_proj") ||
        has_pair(c, "attn", "proj") || has_pair(c, "attention", "dense") ||
        has_pair(c, "self_attention", "dense") || has_pair(c, "self_attn", "dense") ||
        (has(c, "attention") && has_pair(c, "output", "dense")))
        return Role::attn_o;
    Parts plain;  // GGUF shared experts read as their dense counterparts
    for (auto part : c) plain.push_back(without_shexp(part));
    if (has_any(plain, {"gate_proj", "ffn_gate", "w1"})) return Role::mlp_gate;
    if (has_any(plain, {"up_proj", "ffn_up", "c_fc", "dense_h_to_4h", "w3", "fc1"}) ||
        has_pair(plain, "intermediate", "dense"))
        return Role::mlp_up;
    if (has_any(plain, {"down_proj", "ffn_down", "dense_4h_to_h", "w2", "fc2"}) ||
        has_pair(plain, "mlp", "c_proj") || (in_layer && has_pair(plain, "output", "dense")))
        return Role::mlp_down;
    if (has_any(c, {"embed_tokens", "wte", "wpe", "embed_in", "word_embeddings", "position_embeddings",
                    "token_type_embeddings", "token_embd", "tok_embeddings", "position_embd", "token_types",
                    "embed_positions"}) ||
        (!in_layer && c.size() == 2 && c[0] == "shared"))
        return Role::embed;
    if (has(c, "lm_head") || has(c, "embed_out") || (!in_layer && c.size() == 2 && c[0] == "output"))
        return Role::lm_head;
    return Role::other;
}

bool is_shared_expert(const Parts& c) {
    if (has_any(c, {"shared_expert", "shared_experts", "shared_mlp"})) return true;
    return std::any_of(c.begin(), c.end(),
                       [](auto p) { return p.ends_with("_shexp") && p != "ffn_gate_inp_shexp"; });
}

}  // namespace

std::string_view role_name(Role r) { return kRoleNames[static_cast<std::size_t>(r)]; }

std::optional<Role> role_from_name(std::string_view name) {
    for (std::size_t i = 0; i < kRoleNames.size(); ++i)
        if (kRoleNames[i] == name) return static_cast<Role>(i);
    return std::nullopt;
}

bool role_is_attention(Role r) {
    return r == Role::attn_q || r == Role::attn_k || r == Role::attn_v || r == Role::attn_o ||
           r == Role::attn_qkv || r == Role::attn_q_a || r == Role::attn_kv_a || r == Role::attn_kv_b;
}

bool role_is_mlp_projection(Role r) {
    return r == Role::mlp_gate || r == Role::mlp_up || r == Role::mlp_down || r == Role::mlp_gate_up;
}

bool is_quantization_side_tensor(std::string_view name) {
    static constexpr std::array<std::string_view, 12> kSuffixes{".input_scale",      ".input_global_scale",
                                                                ".input_zero_point", ".activation_scale",
                                                                ".output_scale",     ".k_scale",
                                                                ".v_scale",          ".q_scale",
                                                                ".kv_scale",         ".prob_scale",
                                                                ".weight_format",    ".weight_shape"};
    return std::any_of(kSuffixes.begin(), kSuffixes.end(), [&](auto s) { return name.ends_with(s); });
}

bool is_quantization_part(std::string_view name) {
    static constexpr std::array<std::string_view, 15> kWeightParts{".weight_scale",
                                                                   ".weight_scale_inv",
                                                                   ".weight_zero_point",
                                                                   ".weight_global_scale",
                                                                   ".weight_g_idx",
                                                                   ".scales",
                                                                   ".qzeros",
                                                                   ".g_idx",
                                                                   ".SCB",
                                                                   ".absmax",
                                                                   ".quant_map",
                                                                   ".nested_absmax",
                                                                   ".nested_quant_map",
                                                                   "_scales",
                                                                   ".quant_state."};
    return is_quantization_side_tensor(name) ||
           std::any_of(kWeightParts.begin(), kWeightParts.end(), [&](auto s) {
               return s == ".quant_state." ? name.find(s) != std::string_view::npos : name.ends_with(s);
           });
}

TensorRole classify_tensor(std::string_view name) {
    const auto comps = split_dots(name);
    TensorRole out;

    static constexpr std::array<std::string_view, 6> kContainers{"layers", "layer", "h",
                                                                 "blocks", "blk",   "block"};
    for (std::size_t i = 0; i + 1 < comps.size(); ++i) {
        if (std::find(kContainers.begin(), kContainers.end(), comps[i]) != kContainers.end()) {
            if (auto v = parse_int(comps[i + 1])) {
                out.layer = *v;
                break;
            }
        }
    }
    for (std::size_t i = 0; i + 1 < comps.size(); ++i)
        if (comps[i] == "experts" || comps[i].ends_with("_exps"))
            if (auto v = parse_int(comps[i + 1])) {
                out.expert = *v;
                break;
            }
    if (is_shared_expert(comps))
        out.expert_kind = ExpertKind::shared, out.expert.reset();
    else if (out.expert || std::any_of(comps.begin(), comps.end(),
                                       [](auto p) { return p == "experts" || p.ends_with("_exps"); }))
        out.expert_kind = ExpertKind::routed;
    out.component = component_of(comps);
    // A scale or zero-point tensor keeps role other: no head blocks, never pooled with the weights.
    if (!is_quantization_part(name)) out.role = classify_role(comps, out.layer.has_value());
    return out;
}

std::string_view component_name(Component c) { return kComponentNames[static_cast<std::size_t>(c)]; }

std::optional<Component> component_from_name(std::string_view name) {
    for (std::size_t i = 0; i < kComponentNames.size(); ++i)
        if (kComponentNames[i] == name) return static_cast<Component>(i);
    return std::nullopt;
}

std::string_view expert_kind_name(ExpertKind k) { return kExpertKindNames[static_cast<std::size_t>(k)]; }

}  // namespace diffract::model
