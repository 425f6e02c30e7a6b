// A model's configuration as the schema reads it: the attention layout and head geometry of the
// language model and of each tower, from config.json (or GGUF metadata mapped to the same keys).
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/model/schema.hpp"

namespace diffract::model {
namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
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

// The architectures whose attention tensors do not follow the standard layout, each with its reason.
// Everything else with a head count and a head width (or hidden size) is split as standard: separate
// q/k/v/o projections of heads × head_dim rows, or a fused qkv as [q; k; v] along rows.
struct LayoutException {
    std::string_view model_type;
    std::string_view family;
    QkvLayout qkv_layout;
    bool conv1d_transposed;
    bool split;  // false: heads are not split (the reason says why)
    std::string_view reason;
};
constexpr std::array<LayoutException, 5> kLayoutExceptions{{
    {"gpt2", "gpt2", QkvLayout::concatenated, true, true, "Conv1D stores weights as [in, out]"},
    {"gpt_neox", "gpt_neox", QkvLayout::interleaved_per_head, false, true,
     "query_key_value rows are [q_h; k_h; v_h] head by head"},
    {"bloom", "bloom", QkvLayout::interleaved_per_head, false, true,
     "query_key_value rows are [q_h; k_h; v_h] head by head"},
    {"internlm2", "internlm2", QkvLayout::grouped_by_kv, false, true,
     "wqkv rows are grouped by key/value head: [q × group; k; v] per group"},
    {"qwen3_next", "qwen3_next", QkvLayout::separate, false, false,
     "gated attention: q_proj holds each head's query and gate interleaved (twice heads × head_dim rows)"},
}};

// The model types whose standard layout was verified against transformers' modeling code (and llama.cpp's
// GGUF naming): for them a config that contradicts a projection is an error, not a guess to drop.
// Every other type with a head count is split on its geometry alone, and a mismatch there leaves its
// heads unsplit with a warning (check_head_geometry).
constexpr std::array<std::string_view, 38> kVerifiedTypes{
    "llama",       "mistral",    "mixtral",    "qwen2",       "qwen2_moe",   "qwen3",       "qwen3_moe",
    "olmo",        "olmo2",      "olmo3",      "olmoe",       "gemma",       "gemma2",      "gemma3",
    "gemma3_text", "granite",    "granitemoe", "stablelm",    "deepseek",    "llama4_text", "qwen2moe",
    "qwen3moe",    "qwen2vl",    "llama4",     "internlm2",   "phi3",        "gpt2",        "gpt_neox",
    "bert",        "roberta",    "gpt_oss",    "deepseek_v2", "deepseek_v3", "deepseek2",   "bloom",
    "falcon",      "starcoder2", "cohere2"};

bool verified_type(std::string_view model_type) {
    return std::find(kVerifiedTypes.begin(), kVerifiedTypes.end(), model_type) != kVerifiedTypes.end();
}

const LayoutException* layout_exception(std::string_view model_type) {
    for (const auto& e : kLayoutExceptions)
        if (e.model_type == model_type) return &e;
    return nullptr;
}

// Falcon's fused query_key_value depends on its flags: grouped by key/value head with
// new_decoder_architecture, [q; k; v] with one key/value head under multi_query, else interleaved per
// head (falcon-rw).
void falcon_layout(const nlohmann::json& cfg, ModelSchema& s, HeadGeometry& g) {
    auto flag = [&](const char* key) {
        const auto it = cfg.find(key);
        return it != cfg.end() && it->is_boolean() && it->get<bool>();
    };
    s.family = "falcon";
    if (flag("new_decoder_architecture"))
        s.qkv_layout = QkvLayout::grouped_by_kv;
    else if (flag("multi_query"))
        s.qkv_layout = QkvLayout::concatenated, g.n_kv_heads = 1;
    else
        s.qkv_layout = QkvLayout::interleaved_per_head, g.n_kv_heads = g.n_heads;
}

std::string model_type_of(const nlohmann::json& cfg, const std::string& label) {
    const auto m = cfg.find("model_type");
    if (m == cfg.end() || m->is_null()) return "";
    if (!m->is_string())
        throw_input_error(
            label, "",
            fmt::format("key 'model_type' is not a string (expected a string, found {})", m->type_name()));
    return m->get<std::string>();
}

// Multi-head latent attention's dimensions (kv_lora_rank present): the query/key head is
// qk_nope_head_dim + qk_rope_head_dim wide, the value head v_head_dim. config.json's head_dim, where
// DeepSeek's configs give one, is the rotary part and is not the head width.
bool latent_geometry(const nlohmann::json& cfg, const std::string& label, HeadGeometry& g) {
    if (!config_geometry(cfg, {"kv_lora_rank"}, label)) return false;
    const auto nope = config_geometry(cfg, {"qk_nope_head_dim"}, label);
    const auto rope = config_geometry(cfg, {"qk_rope_head_dim"}, label);
    const auto v = config_geometry(cfg, {"v_head_dim"}, label);
    (void)config_geometry(cfg, {"q_lora_rank"}, label);
    if (!nope || !rope || !v)
        throw_input_error(label, "",
                          "kv_lora_rank (multi-head latent attention) without qk_nope_head_dim, "
                          "qk_rope_head_dim and v_head_dim");
    g.latent = true;
    g.head_dim = *nope + *rope;
    g.qk_rope_head_dim = *rope;
    g.v_head_dim = *v;
    return true;
}

// The language model's config: text_config where a multimodal wrapper nests it, else the config.
const nlohmann::json& language_config(const nlohmann::json& config) {
    const auto t = config.find("text_config");
    return t != config.end() && t->is_object() ? *t : config;
}

int layer_count(const nlohmann::json& cfg, const std::string& label) {
    return config_geometry(cfg, {"num_hidden_layers", "n_layer", "num_layers", "n_layers"}, label)
        .value_or(0);
}

// A tower's geometry: read leniently (a tower never makes the model unreadable), with the aliases the
// vision and audio encoders use. Qwen2-VL's vision hidden_size is the language model's width and its
// own is embed_dim, so embed_dim comes first.
TowerSchema tower_schema(const nlohmann::json& cfg, std::string_view what, const std::string& label,
                         std::vector<std::string>& warnings) {
    TowerSchema t;
    auto first = [&](std::initializer_list<const char*> keys) -> std::optional<int> {
        for (const char* k : keys)
            if (const auto it = cfg.find(k); it != cfg.end() && !it->is_null())
                return geometry_value(*it, fmt::format("{}.{}", what, k), label);
        return std::nullopt;
    };
    try {
        const auto heads = first({"num_attention_heads", "num_heads", "encoder_attention_heads", "n_heads"});
        const auto width = first({"embed_dim", "hidden_size", "d_model", "width"});
        const auto head_dim = first({"head_dim"});
        const auto kv = first({"num_key_value_heads"});
        t.num_layers = first({"num_hidden_layers", "depth", "encoder_layers", "num_layers"});
        if (!heads || (!width && !head_dim)) {
            warnings.push_back(fmt::format("{} has no head count or width: its heads are not split", what));
            return t;
        }
        HeadGeometry g;
        g.n_heads = *heads;
        g.n_kv_heads = kv.value_or(g.n_heads);
        g.hidden = width.value_or(0);
        g.head_dim = head_dim.value_or(0);
        if (g.head_dim == 0) {
            if (g.hidden % g.n_heads != 0)
                throw InputError(fmt::format("width {} is not divisible by {} heads", g.hidden, g.n_heads));
            g.head_dim = g.hidden / g.n_heads;
        }
        if (g.n_heads % g.n_kv_heads != 0)
            throw InputError(
                fmt::format("{} heads are not a multiple of {} key/value heads", g.n_heads, g.n_kv_heads));
        t.heads = g;
    } catch (const InputError& e) {
        warnings.push_back(fmt::format("{}: its heads are not split ({})", what, e.what()));
        t.heads.reset();
    }
    return t;
}

void read_towers(const nlohmann::json& config, const std::string& label, ModelSchema& s) {
    constexpr std::array<std::pair<const char*, Component>, 3> kTowers{
        {{"vision_config", Component::vision},
         {"audio_config", Component::audio},
         {"vision_tower_config", Component::vision}}};
    for (const auto& [key, component] : kTowers) {
        const auto it = config.find(key);
        if (it == config.end() || !it->is_object() || s.towers.count(component)) continue;
        s.towers[component] = tower_schema(*it, key, label, s.warnings);
    }
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

const HeadGeometry* ModelSchema::heads_of(Component c) const {
    if (c == Component::language) return heads ? &*heads : nullptr;
    const auto it = towers.find(c);
    return it != towers.end() && it->second.heads ? &*it->second.heads : nullptr;
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
    const std::string model_type = model_type_of(config, label);
    if (auto a = config.find("architectures");
        a != config.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
        s.architecture = (*a)[0].get<std::string>();
    else if (!model_type.empty())
        s.architecture = model_type;
    read_towers(config, label, s);

    // The language model's geometry: its own keys under text_config, or the config's.
    const nlohmann::json& lm = language_config(config);
    const std::string lm_type = &lm == &config ? model_type : model_type_of(lm, label);
    const std::string mt =
        lower(!lm_type.empty() ? lm_type : (!model_type.empty() ? model_type : s.architecture));
    HeadGeometry g;
    const auto heads = config_geometry(lm, {"num_attention_heads", "n_head", "num_heads", "n_heads"}, label);
    const auto kv = config_geometry(lm, {"num_key_value_heads", "n_head_kv", "num_kv_heads"}, label);
    const auto hidden = config_geometry(lm, {"hidden_size", "n_embd", "d_model"}, label);
    const auto head_dim = config_geometry(lm, {"head_dim", "d_kv"}, label);
    if (const int layers = layer_count(lm, label)) {
        // Multi-token-prediction layers follow the counted ones (DeepSeek-V3's num_nextn_predict_layers);
        // an encoder-decoder's decoder may be deeper than its encoder (T5's num_decoder_layers).
        const auto nextn = lm.find("num_nextn_predict_layers");
        const bool extra = nextn != lm.end() && nextn->is_number_integer() &&
                           nextn->get<std::int64_t>() > 0 && nextn->get<std::int64_t>() <= kMaxGeometryValue;
        const int decoder = config_geometry(lm, {"num_decoder_layers"}, label).value_or(0);
        s.num_layers = std::max(layers, decoder) + (extra ? static_cast<int>(nextn->get<std::int64_t>()) : 0);
    }
    (void)config_geometry(lm, {"intermediate_size", "n_inner"}, label);
    (void)config_geometry(lm, {"moe_intermediate_size"}, label);
    g.n_heads = heads.value_or(0);
    g.n_kv_heads = kv.value_or(g.n_heads);
    g.hidden = hidden.value_or(0);
    g.head_dim = head_dim.value_or(0);

    const auto* exception = layout_exception(mt);
    if (exception) {
        s.qkv_layout = exception->qkv_layout;
        s.conv1d_transposed = exception->conv1d_transposed;
        if (!exception->split) {
            s.family = exception->family;
            s.warnings.push_back(fmt::format("architecture '{}' is not split into heads: {}", s.architecture,
                                             exception->reason));
            return s;
        }
    }
    if (g.n_heads <= 0) {
        s.warnings.push_back(
            fmt::format("architecture '{}': config.json has no head count: attention heads are not split",
                        s.architecture));
        return s;
    }
    s.family = exception ? exception->family : "standard";
    s.geometry_verified = verified_type(mt);
    if (mt == "falcon") {
        falcon_layout(lm, s, g);
        if (kv) g.n_kv_heads = *kv;
    } else if (!kv) {
        // One key/value head for every query head (GPT-BigCode's multi_query).
        const auto mq = lm.find("multi_query");
        if (mq != lm.end() && mq->is_boolean() && mq->get<bool>()) g.n_kv_heads = 1;
    }
    if (latent_geometry(lm, label, g)) {
        s.family = "mla";
        g.n_kv_heads = g.n_heads;  // every head has its own key and value rows in kv_b_proj
    }
    if (g.head_dim == 0 && g.hidden > 0) {
        if (g.hidden % g.n_heads != 0)
            throw_input_error(label, "",
                              fmt::format("hidden_size {} is not divisible by num_attention_heads {}",
                                          g.hidden, g.n_heads));
        g.head_dim = g.hidden / g.n_heads;
    }
    if (g.head_dim <= 0) {
        s.family = "unknown";
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

}  // namespace diffract::model
