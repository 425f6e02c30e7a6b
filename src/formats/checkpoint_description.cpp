#include "diffract/formats/checkpoint_description.hpp"

#include <map>
#include <set>

#include "diffract/core/quantized.hpp"
#include "diffract/formats/lora_adapter.hpp"

namespace diffract::formats {
namespace {

using Json = nlohmann::ordered_json;

std::string dtype_label(const Checkpoint& ck, const TensorInfo& t) {
    if (t.quant && t.quant->scheme == QuantScheme::strided)
        return std::string(dtype_name(t.quant->codes.dtype));
    if (t.quant) return t.quant->description;
    auto it = ck.unsupported_types.find(t.name);
    return it != ck.unsupported_types.end() ? it->second : std::string(dtype_name(t.dtype));
}

// The adapter as PEFT configured it and as it applies to this model's tensors (its modules matched
// again: the merged model holds the base's names and shapes).
Json describe_adapter(const Checkpoint& ck) {
    const auto adapter = open_lora_adapter(ck.adapter, ck);
    const auto& cfg = adapter.config;
    auto value = [&](const char* key, Json fallback) {
        return cfg.contains(key) ? Json(cfg[key]) : fallback;
    };
    Json targets = Json::array(), replaced = Json::array();
    std::set<int> ranks;
    std::set<double> alphas;
    for (const auto& m : adapter.modules) {
        targets.push_back({{"module", m.module},
                           {"tensor", m.target},
                           {"rank", m.rank},
                           {"alpha", m.alpha},
                           {"scale", m.scale}});
        ranks.insert(m.rank);
        alphas.insert(m.alpha);
    }
    for (const auto& r : adapter.replacements) replaced.push_back(r.tensor.name);
    return {{"path", adapter.path},
            {"base", ck.path},
            {"base_model_name_or_path", adapter.base_model},
            {"r", value("r", nullptr)},
            {"lora_alpha", value("lora_alpha", nullptr)},
            {"use_rslora", value("use_rslora", false)},
            {"fan_in_fan_out", value("fan_in_fan_out", false)},
            {"target_modules", value("target_modules", nullptr)},
            {"ranks", ranks},
            {"alphas", alphas},
            {"targets", targets},
            {"replaced", replaced}};
}

}  // namespace

// The scheme of a quantized checkpoint and how many matrices of each kind it decodes; null when the
// checkpoint is not quantized.
Json describe_quantization(const Checkpoint& ck) {
    if (ck.quantization.empty() && ck.undecoded_quantization.empty()) return nullptr;
    std::map<std::string, std::size_t> kinds;
    for (const auto& t : ck.tensors)
        if (t.quant && t.quant->scheme != QuantScheme::strided) ++kinds[t.quant->description];
    Json matrices = Json::object();
    for (const auto& [kind, n] : kinds) matrices[kind] = n;
    return {
        {"scheme", ck.quantization},
        {"matrices", matrices},
        {"undecoded", ck.undecoded_quantization.empty() ? Json(nullptr) : Json(ck.undecoded_quantization)}};
}

Json describe_checkpoint(const Checkpoint& ck) {
    // The head geometry is checked against every attention projection here, so that a bad config is
    // reported when a checkpoint is described (inspect, Python's describe) rather than half-way through
    // an analysis.
    for (const auto& t : ck.tensors) model::head_blocks(ck.schema, t, model::classify_tensor(t.name).role);
    Json out;
    out["model"] = ck.name;
    out["path"] = ck.path;
    out["format"] = format_name(ck.format);
    out["architecture"] = ck.schema.architecture;
    out["family"] = ck.schema.family;
    if (ck.schema.heads) {
        const auto& g = *ck.schema.heads;
        out["heads"] = {{"num_attention_heads", g.n_heads},
                        {"num_key_value_heads", g.n_kv_heads},
                        {"head_dim", g.head_dim},
                        {"hidden_size", g.hidden}};
    } else {
        out["heads"] = nullptr;
    }
    out["quantization"] = describe_quantization(ck);
    out["packed_experts"] = ck.packed_experts;
    if (!ck.adapter.empty()) out["adapter"] = describe_adapter(ck);
    std::uint64_t params = 0;
    for (const auto& t : ck.tensors) params += static_cast<std::uint64_t>(t.numel());
    out["parameters"] = params;
    out["tensors"] = Json::array();
    for (const auto& t : ck.tensors) {
        const auto r = model::classify_tensor(t.name);
        out["tensors"].push_back(
            {{"name", t.name},
             {"dtype", dtype_label(ck, t)},
             {"shape", t.shape},
             {"layer", r.layer ? Json(*r.layer) : Json(nullptr)},
             {"role", model::role_name(r.role)},
             {"expert", r.expert ? Json(*r.expert) : Json(nullptr)},
             {"quantization", t.quant && t.quant->scheme != QuantScheme::strided ? Json(t.quant->description)
                                                                                 : Json(nullptr)},
             {"file", t.path()}});
    }
    return out;
}

}  // namespace diffract::formats
