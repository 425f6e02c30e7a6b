// config.json and its GGUF equivalent: the model's configuration as the schema reads it.
#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/formats/gguf.hpp"
#include "diffract/model/schema.hpp"

namespace diffract::formats {

nlohmann::json parse_config_json(std::span<const std::byte> bytes, const std::string& label) {
    const auto* text = reinterpret_cast<const char*>(bytes.data());
    nlohmann::json j;
    try {
        j = parse_json_bounded(std::string_view(text, bytes.size()), label, true);
    } catch (const nlohmann::json::exception& e) {
        throw_input_error(label, "", fmt::format("config is not valid JSON ({})", e.what()));
    }
    if (!j.is_object())
        throw_input_error(
            label, "",
            fmt::format("config is not a JSON object (expected an object, found {})", j.type_name()));
    return j;
}

nlohmann::json gguf_config(const GgufFile& g, const std::string& label) {
    const std::string arch = g.architecture;
    nlohmann::json cfg = nlohmann::json::object();
    cfg["model_type"] = arch.empty() ? "unknown" : arch;
    cfg["architectures"] = nlohmann::json::array({arch.empty() ? "unknown" : arch});
    if (arch.empty()) return cfg;
    // A value of the geometry rule (model::geometry_value), named by its metadata key. A per-layer
    // array (some architectures vary the head counts by layer; 0 marks a layer without attention)
    // stands for its value when every layer agrees, and for "unknown" otherwise.
    auto value = [&](const std::string& key) -> std::optional<int> {
        const auto it = g.metadata.find(arch + "." + key);
        if (it == g.metadata.end()) return std::nullopt;
        const std::string what = fmt::format("metadata key '{}.{}'", arch, key);
        if (!it->is_array()) return model::geometry_value(*it, what, label);
        std::optional<int> common;
        bool uniform = true;
        for (const auto& e : *it) {
            if (e.is_number_integer() && e.get<std::int64_t>() == 0) {  // a layer without attention
                uniform = false;
                continue;
            }
            const auto v = model::geometry_value(e, what, label);
            if (!v || (common && *common != *v)) uniform = false;
            if (!common) common = v;
        }
        return uniform ? common : std::nullopt;
    };
    const auto heads = value("attention.head_count");
    const auto kv = value("attention.head_count_kv");
    const bool per_layer_heads = (g.metadata.contains(arch + ".attention.head_count") && !heads) ||
                                 (g.metadata.contains(arch + ".attention.head_count_kv") && !kv);
    const std::pair<const char*, const char*> keys[] = {{"embedding_length", "hidden_size"},
                                                        {"attention.key_length", "head_dim"},
                                                        {"attention.value_length", nullptr},
                                                        {"block_count", "num_hidden_layers"},
                                                        {"feed_forward_length", "intermediate_size"}};
    for (const auto& [key, hf_key] : keys)
        if (const auto v = value(key); v && hf_key) cfg[hf_key] = *v;
    // Multi-head latent attention (deepseek2 and its kin): key_length is the query/key head's width
    // (non-rotary + rotary part), value_length the value head's; the MLA-absorbed conversions state
    // the unabsorbed widths as key_length_mla and value_length_mla.
    if (const auto kv_lora = value("attention.kv_lora_rank")) {
        const auto rope = value("rope.dimension_count");
        auto key = value("attention.key_length_mla"), val = value("attention.value_length_mla");
        if (!key) key = value("attention.key_length");
        if (!val) val = value("attention.value_length");
        cfg.erase("head_dim");
        if (!rope || !key || !val || *key <= *rope) return cfg;  // widths unknown: heads are not split
        cfg["kv_lora_rank"] = *kv_lora;
        if (const auto q_lora = value("attention.q_lora_rank")) cfg["q_lora_rank"] = *q_lora;
        cfg["qk_rope_head_dim"] = *rope;
        cfg["qk_nope_head_dim"] = *key - *rope;
        cfg["v_head_dim"] = *val;
    }
    if (!per_layer_heads) {
        if (heads) cfg["num_attention_heads"] = *heads;
        if (kv) cfg["num_key_value_heads"] = *kv;
    }
    return cfg;
}

}  // namespace diffract::formats
