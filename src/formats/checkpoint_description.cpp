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

namespace {

Json geometry_json(const model::HeadGeometry& g) {
    Json j{{"num_attention_heads", g.n_heads},
           {"num_key_value_heads", g.n_kv_heads},
           {"head_dim", g.head_dim},
           {"hidden_size", g.hidden}};
    if (g.latent) j["qk_rope_head_dim"] = g.qk_rope_head_dim, j["v_head_dim"] = g.value_dim();
    return j;
}

// The mixture-of-experts summary: how many routed experts (distinct indices), in how many layers, and
// whether shared experts are present; null for a dense model.
Json experts_json(const Checkpoint& ck) {
    std::set<int> routed, layers;
    bool shared = false;
    for (const auto& t : ck.tensors) {
        const auto r = model::classify_tensor(t.name);
        if (r.expert_kind == model::ExpertKind::shared) shared = true;
        if (r.expert_kind != model::ExpertKind::routed || !r.expert) continue;
        routed.insert(*r.expert);
        if (r.layer) layers.insert(*r.layer);
    }
    if (routed.empty() && !shared) return nullptr;
    return {{"routed", routed.size()}, {"layers", layers.size()}, {"shared", shared}};
}

}  // namespace

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
    out["heads"] = ck.schema.heads ? geometry_json(*ck.schema.heads) : Json(nullptr);
    out["towers"] = Json::object();
    for (const auto& [component, tower] : ck.schema.towers)
        out["towers"][std::string(model::component_name(component))] = {
            {"heads", tower.heads ? geometry_json(*tower.heads) : Json(nullptr)},
            {"num_layers", tower.num_layers ? Json(*tower.num_layers) : Json(nullptr)}};
    out["experts"] = experts_json(ck);
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
             {"component", model::component_name(r.component)},
             {"expert", r.expert ? Json(*r.expert) : Json(nullptr)},
             {"expert_kind", model::expert_kind_name(r.expert_kind)},
             {"quantization", t.quant && t.quant->scheme != QuantScheme::strided ? Json(t.quant->description)
                                                                                 : Json(nullptr)},
             {"file", t.path()}});
    }
    return out;
}

}  // namespace diffract::formats
