#include "diffract/model/schema.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"

namespace diffract::model {
namespace {

constexpr std::array<std::string_view, 13> kRoleNames{
    "attn_q",   "attn_k",      "attn_v", "attn_o",  "attn_qkv", "mlp_gate", "mlp_up",
    "mlp_down", "mlp_gate_up", "embed",  "lm_head", "norm",     "other"};

std::vector<std::string_view> split_dots(std::string_view s) {
    std::vector<std::string_view> out;
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

bool has(const std::vector<std::string_view>& comps, std::string_view c) {
    return std::find(comps.begin(), comps.end(), c) != comps.end();
}

// Component `a` immediately followed by `b`.
bool has_pair(const std::vector<std::string_view>& comps, std::string_view a, std::string_view b) {
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

Role classify_role(const std::vector<std::string_view>& c, bool in_layer) {
    for (auto part : c) {
        const auto l = lower(part);
        if (l.find("norm") != std::string::npos || l.starts_with("ln_") || l == "ln") return Role::norm;
    }
    // GGUF's packed experts, split per expert (formats/packed_experts.hpp).
    if (has(c, "ffn_gate_up_exps"))
        return has(c, "gate") ? Role::mlp_gate : (has(c, "up") ? Role::mlp_up : Role::mlp_gate_up);
    if (has(c, "ffn_gate_exps")) return Role::mlp_gate;
    if (has(c, "ffn_up_exps")) return Role::mlp_up;
    if (has(c, "ffn_down_exps")) return Role::mlp_down;
    // Fused projections first: their names contain the separate ones' substrings.
    if (has(c, "qkv_proj") || has(c, "c_attn") || has(c, "query_key_value") || has(c, "attn_qkv") ||
        has(c, "Wqkv"))
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
    if (has(c, "q_proj") || has(c, "query") || has(c, "attn_q") || has(c, "wq")) return Role::attn_q;
    if (has(c, "k_proj") || has(c, "key") || has(c, "attn_k") || has(c, "wk")) return Role::attn_k;
    if (has(c, "v_proj") || has(c, "value") || has(c, "attn_v") || has(c, "wv")) return Role::attn_v;
    if (has(c, "o_proj") || has(c, "attn_output") || has(c, "out_proj") || has(c, "wo") ||
        has_pair(c, "attn", "c_proj") || has_pair(c, "attention", "dense") ||
        has_pair(c, "self_attention", "dense") || (has(c, "attention") && has_pair(c, "output", "dense")))
        return Role::attn_o;
    if (has(c, "gate_proj") || has(c, "ffn_gate") || has(c, "w1")) return Role::mlp_gate;
    if (has(c, "up_proj") || has(c, "ffn_up") || has(c, "c_fc") || has(c, "dense_h_to_4h") || has(c, "w3") ||
        has(c, "fc1") || has_pair(c, "intermediate", "dense"))
        return Role::mlp_up;
    if (has(c, "down_proj") || has(c, "ffn_down") || has(c, "dense_4h_to_h") || has(c, "w2") ||
        has(c, "fc2") || has_pair(c, "mlp", "c_proj") || (in_layer && has_pair(c, "output", "dense")))
        return Role::mlp_down;
    if (has(c, "embed_tokens") || has(c, "wte") || has(c, "wpe") || has(c, "embed_in") ||
        has(c, "word_embeddings") || has(c, "position_embeddings") || has(c, "token_type_embeddings") ||
        has(c, "token_embd") || has(c, "tok_embeddings") || has(c, "position_embd") ||
        has(c, "token_types") || has(c, "embed_positions") ||
        (!in_layer && c.size() == 2 && c[0] == "shared"))
        return Role::embed;
    if (has(c, "lm_head") || has(c, "embed_out") || (!in_layer && c.size() == 2 && c[0] == "output"))
        return Role::lm_head;
    return Role::other;
}

// The first of `keys` that the config gives (null counts as absent), validated; all the aliases given
// must agree.
std::optional<int> config_geometry(const nlohmann::json& cfg, std::initializer_list<const char*> keys,
                                   const std::string& label) {
    std::optional<int> out;
    const char* first = nullptr;
    for (const char* k : keys) {
        auto it = cfg.find(k);
        if (it == cfg.end()) continue;
        const auto v = geometry_value(*it, fmt::format("key '{}'", k), label);
        if (!v) continue;
        if (out && *out != *v)
            throw_input_error(
                label, "",
                fmt::format("key '{}' contradicts key '{}' (expected {}, found {})", k, first, *out, *v));
        if (!out) out = v, first = k;
    }
    return out;
}

}  // namespace

std::optional<int> geometry_value(const nlohmann::json& value, std::string_view what,
                                  const std::string& label) {
    if (value.is_null()) return std::nullopt;
    if (value.is_number_unsigned()) {
        const auto v = value.get<std::uint64_t>();
        if (v >= 1 && v <= static_cast<std::uint64_t>(kMaxGeometryValue)) return static_cast<int>(v);
    } else if (value.is_number_integer()) {
        const auto v = value.get<std::int64_t>();
        if (v >= 1 && v <= kMaxGeometryValue) return static_cast<int>(v);
    }
    const std::string found = json_preview(value);
    throw_input_error(label, "",
                      fmt::format("{}: geometry must be a positive integer (expected 1..{}, found {})", what,
                                  kMaxGeometryValue, found));
}

std::string_view role_name(Role r) { return kRoleNames[static_cast<std::size_t>(r)]; }

std::optional<Role> role_from_name(std::string_view name) {
    for (std::size_t i = 0; i < kRoleNames.size(); ++i)
        if (kRoleNames[i] == name) return static_cast<Role>(i);
    return std::nullopt;
}

bool role_is_attention(Role r) {
    return r == Role::attn_q || r == Role::attn_k || r == Role::attn_v || r == Role::attn_o ||
           r == Role::attn_qkv;
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
    // A scale or zero-point tensor keeps role other: no head blocks, never pooled with the weights.
    if (!is_quantization_part(name)) out.role = classify_role(comps, out.layer.has_value());
    return out;
}

ModelSchema schema_from_config(const nlohmann::json& config, const std::string& label) {
    ModelSchema s;
    s.architecture = "unknown";
    s.family = "unknown";
    if (!config.is_null() && !config.is_object())
        throw_input_error(
            label, "",
            fmt::format("config is not a JSON object (expected an object, found {})", config.type_name()));
    if (!config.is_object()) {
        s.warnings.push_back("no config.json: architecture unknown, attention heads are not split");
        return s;
    }
    std::string model_type;
    if (auto m = config.find("model_type"); m != config.end() && !m->is_null()) {
        if (!m->is_string())
            throw_input_error(label, "",
                              fmt::format("key 'model_type' is not a string (expected a string, found {})",
                                          m->type_name()));
        model_type = m->get<std::string>();
    }
    if (auto a = config.find("architectures");
        a != config.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
        s.architecture = (*a)[0].get<std::string>();
    else if (!model_type.empty())
        s.architecture = model_type;
    const std::string mt = lower(model_type.empty() ? s.architecture : model_type);

    // Separate q/k/v/o projections whose rows are heads × head_dim, by exact model type: a prefix would
    // take in variants of other layouts (qwen3_next's gated q_proj has twice the rows), which are then
    // unknown (heads not split).
    static constexpr std::array<std::string_view, 25> kLlamaLike{
        // Hugging Face model_type
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "olmo", "olmo2", "olmo3",
        "olmoe", "gemma", "gemma2", "gemma3", "gemma3_text", "granite", "granitemoe", "stablelm", "deepseek",
        "llama4_text",
        // GGUF general.architecture where it is spelled differently
        "qwen2moe", "qwen3moe", "qwen2vl", "llama4",
        // Hugging Face's internlm2 fuses q/k/v into wqkv, grouped by KV head: not split (role 'other'), so
        // only its wo is; its GGUF conversion has separate q/k/v.
        "internlm2"};
    if (std::find(kLlamaLike.begin(), kLlamaLike.end(), mt) != kLlamaLike.end())
        s.family = "llama";
    else if (mt == "phi3")
        s.family = "phi3", s.qkv_layout = QkvLayout::concatenated;
    else if (mt == "gpt2")
        s.family = "gpt2", s.qkv_layout = QkvLayout::concatenated, s.conv1d_transposed = true;
    else if (mt == "gpt_neox")
        s.family = "gpt_neox", s.qkv_layout = QkvLayout::interleaved_per_head;
    else if (mt == "bert" || mt == "roberta")
        s.family = "bert";

    if (s.family == "unknown") {
        s.warnings.push_back(fmt::format("architecture '{}' is not recognised: attention heads are not split",
                                         s.architecture));
        return s;
    }
    // One rule for every geometry key: absent (or null), or a positive integer; aliases agree.
    HeadGeometry g;
    const auto heads =
        config_geometry(config, {"num_attention_heads", "n_head", "num_heads", "n_heads"}, label);
    const auto kv = config_geometry(config, {"num_key_value_heads", "n_head_kv", "num_kv_heads"}, label);
    const auto hidden = config_geometry(config, {"hidden_size", "n_embd", "d_model"}, label);
    const auto head_dim = config_geometry(config, {"head_dim"}, label);
    if (const auto layers =
            config_geometry(config, {"num_hidden_layers", "n_layer", "num_layers", "n_layers"}, label)) {
        // Multi-token-prediction layers follow the counted ones (DeepSeek-V3's num_nextn_predict_layers).
        const auto nextn = config.find("num_nextn_predict_layers");
        const bool extra = nextn != config.end() && nextn->is_number_integer() &&
                           nextn->get<std::int64_t>() > 0 && nextn->get<std::int64_t>() <= kMaxGeometryValue;
        s.num_layers = *layers + (extra ? static_cast<int>(nextn->get<std::int64_t>()) : 0);
    }
    (void)config_geometry(config, {"intermediate_size", "n_inner"}, label);
    g.n_heads = heads.value_or(0);
    g.n_kv_heads = kv.value_or(g.n_heads);
    g.hidden = hidden.value_or(0);
    g.head_dim = head_dim.value_or(0);
    if (g.n_heads <= 0) {
        s.warnings.push_back("config.json has no head count: attention heads are not split");
        return s;
    }
    if (g.head_dim == 0 && g.hidden > 0) {
        if (g.hidden % g.n_heads != 0)
            throw_input_error(label, "",
                              fmt::format("hidden_size {} is not divisible by num_attention_heads {}",
                                          g.hidden, g.n_heads));
        g.head_dim = g.hidden / g.n_heads;
    }
    if (g.head_dim <= 0) {
        s.warnings.push_back("config.json has no head_dim or hidden size: attention heads are not split");
        return s;
    }
    if (g.n_kv_heads <= 0 || g.n_heads % g.n_kv_heads != 0)
        throw_input_error(label, "",
                          fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}",
                                      g.n_heads, g.n_kv_heads));
    s.heads = g;
    return s;
}

MatrixBlock whole_matrix(const ModelSchema& schema, const TensorInfo& t) {
    MatrixBlock b;
    b.rows = t.shape.size() >= 1 ? t.shape[0] : 1;
    b.cols = 1;
    for (std::size_t i = 1; i < t.shape.size(); ++i) b.cols *= t.shape[i];
    // Conv1D weights are [in, out]; embeddings and 1-D tensors are not Conv1D.
    const auto role = classify_tensor(t.name).role;
    b.transposed =
        schema.conv1d_transposed && t.shape.size() == 2 && role != Role::embed && role != Role::lm_head;
    return b;
}

std::vector<HeadBlock> head_blocks(const ModelSchema& schema, const TensorInfo& t, Role role) {
    std::vector<HeadBlock> out;
    if (!schema.heads || t.shape.size() != 2 || !role_is_attention(role)) return out;
    const HeadGeometry& g = *schema.heads;
    const std::int64_t d = g.head_dim;
    const MatrixBlock whole = whole_matrix(schema, t);
    // Logical (out × in) extent: rows are output features.
    const std::int64_t out_dim = whole.transposed ? whole.cols : whole.rows;
    const std::int64_t in_dim = whole.transposed ? whole.rows : whole.cols;
    auto mismatch = [&](std::int64_t expected, std::int64_t found, const char* what) {
        throw_input_error(
            t.path(), t.name,
            fmt::format("head geometry does not divide the projection: {} (expected {}, found {})", what,
                        expected, found));
    };
    // Block over logical output rows [r0, r0+n) of the whole matrix, in stored coordinates.
    auto out_rows = [&](std::int64_t r0, std::int64_t n) {
        MatrixBlock b;
        b.transposed = whole.transposed;
        if (whole.transposed)
            b.row0 = 0, b.rows = whole.rows, b.col0 = r0, b.cols = n;
        else
            b.row0 = r0, b.rows = n, b.col0 = 0, b.cols = whole.cols;
        return b;
    };
    auto add_rows = [&](Role proj, int n, std::int64_t base, std::int64_t stride) {
        for (int h = 0; h < n; ++h) out.push_back({h, proj, out_rows(base + h * stride, d)});
    };
    const std::int64_t q_rows = g.n_heads * d, kv_rows = g.n_kv_heads * d;
    // The model width, when the config gives it: the projections' input (Q, K, V) or output (O) side.
    if (g.hidden > 0) {
        const bool o = role == Role::attn_o;
        const std::int64_t side = o ? out_dim : in_dim;
        if (side != g.hidden)
            mismatch(g.hidden, side,
                     o ? "output-projection rows = hidden_size" : "projection columns = hidden_size");
    }
    switch (role) {
        case Role::attn_q:
            if (out_dim != q_rows) mismatch(q_rows, out_dim, "query rows = num_attention_heads x head_dim");
            add_rows(Role::attn_q, g.n_heads, 0, d);
            break;
        case Role::attn_k:
        case Role::attn_v:
            if (out_dim != kv_rows)
                mismatch(kv_rows, out_dim, "key/value rows = num_key_value_heads x head_dim");
            add_rows(role, g.n_kv_heads, 0, d);
            break;
        case Role::attn_o: {
            if (in_dim != q_rows)
                mismatch(q_rows, in_dim, "output-projection columns = num_attention_heads x head_dim");
            for (int h = 0; h < g.n_heads; ++h) {
                MatrixBlock b;
                b.transposed = whole.transposed;
                if (whole.transposed)
                    b.row0 = h * d, b.rows = d, b.col0 = 0, b.cols = whole.cols;
                else
                    b.row0 = 0, b.rows = whole.rows, b.col0 = h * d, b.cols = d;
                out.push_back({h, Role::attn_o, b});
            }
            break;
        }
        case Role::attn_qkv:
            if (out_dim != q_rows + 2 * kv_rows)
                mismatch(q_rows + 2 * kv_rows, out_dim, "fused qkv rows = (heads + 2 x kv heads) x head_dim");
            if (schema.qkv_layout == QkvLayout::interleaved_per_head) {
                if (g.n_kv_heads != g.n_heads)
                    mismatch(g.n_heads, g.n_kv_heads, "interleaved qkv needs kv heads == heads");
                add_rows(Role::attn_q, g.n_heads, 0, 3 * d);
                add_rows(Role::attn_k, g.n_heads, d, 3 * d);
                add_rows(Role::attn_v, g.n_heads, 2 * d, 3 * d);
            } else {
                add_rows(Role::attn_q, g.n_heads, 0, d);
                add_rows(Role::attn_k, g.n_kv_heads, q_rows, d);
                add_rows(Role::attn_v, g.n_kv_heads, q_rows + kv_rows, d);
            }
            break;
        default:
            break;
    }
    return out;
}

}  // namespace diffract::model
