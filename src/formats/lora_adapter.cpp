#include "diffract/formats/lora_adapter.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/core/low_rank.hpp"
#include "diffract/core/mapped_file.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/pattern.hpp"
#include "diffract/formats/hf_cache.hpp"
#include "diffract/model/schema.hpp"

namespace fs = std::filesystem;

namespace diffract::formats {
namespace {

constexpr std::string_view kPrefix = "base_model.model.";
constexpr const char* kConfigFile = "adapter_config.json";
constexpr std::size_t kMaxAdapterStack = 16;

bool ends_with_component(std::string_view name, std::string_view suffix) {
    return name == suffix || (name.size() > suffix.size() && name.ends_with(suffix) &&
                              name[name.size() - suffix.size() - 1] == '.');
}

const nlohmann::ordered_json* member(const nlohmann::ordered_json& j, const char* key) {
    const auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool config_bool(const nlohmann::ordered_json& j, const char* key, const std::string& label) {
    const auto* v = member(j, key);
    if (!v) return false;
    if (!v->is_boolean())
        throw_input_error(label, "", fmt::format("'{}' is not a boolean (found {})", key, json_preview(*v)));
    return v->get<bool>();
}

double config_number(const nlohmann::ordered_json& v, std::string_view key, const std::string& label) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
        throw_input_error(label, "",
                          fmt::format("'{}' is not a positive number (found {})", key, json_preview(v)));
    return v.get<double>();
}

// PEFT's pattern rule: the first key K with re.match("(.*\.)?(K)$", module).
const nlohmann::ordered_json* pattern_value(const nlohmann::ordered_json& config, const char* key,
                                            const std::string& module, const std::string& label) {
    const auto* patterns = member(config, key);
    if (!patterns) return nullptr;
    if (!patterns->is_object()) throw_input_error(label, "", fmt::format("'{}' is not an object", key));
    for (const auto& [k, v] : patterns->items()) {
        const Pattern pattern("(.*\\.)?(" + k + ")", fmt::format("{}: '{}' key '{}'", label, key, k));
        if (pattern.full_match(module)) return &v;
    }
    return nullptr;
}

// target_modules: a list of names (a module matches one that it equals or ends with as ".name"), a
// regular expression matched against the whole module name, or "all-linear".
bool targeted(const nlohmann::ordered_json& config, const std::string& module, const std::string& label) {
    const auto* t = member(config, "target_modules");
    if (!t) return true;
    if (t->is_string()) {
        const auto s = t->get<std::string>();
        if (s == "all-linear") return true;
        return Pattern(s, fmt::format("{}: target_modules", label)).full_match(module);
    }
    if (!t->is_array()) throw_input_error(label, "", "target_modules is neither a list nor a string");
    for (const auto& e : *t)
        if (e.is_string() && ends_with_component(module, e.get<std::string>())) return true;
    return false;
}

// The one base tensor `name` designates: equal, or equal up to leading module components on either
// side ("bert.encoder.x.weight" ~ "encoder.x.weight", "encoder.x.weight" ~ "model.encoder.x.weight").
const TensorInfo& match_base_tensor(const Checkpoint& base, const std::string& name,
                                    const std::string& label) {
    if (const auto* t = base.find(name)) return *t;
    std::vector<const TensorInfo*> found;
    for (const auto& t : base.tensors)
        if (ends_with_component(name, t.name) || ends_with_component(t.name, name)) found.push_back(&t);
    if (found.size() == 1) return *found.front();
    if (found.empty())
        throw_input_error(
            label, name,
            fmt::format("the adapter changes a tensor that the base ({}) does not have", base.path));
    throw_input_error(label, name,
                      fmt::format("the adapter's tensor matches {} tensors of the base ('{}', '{}', ...)",
                                  found.size(), found[0]->name, found[1]->name));
}

struct Factors {
    const TensorInfo* a = nullptr;
    const TensorInfo* b = nullptr;
    bool embedding = false;
};

std::int64_t dim(const TensorInfo& t, std::size_t i) { return t.shape.size() > i ? t.shape[i] : -1; }

// The adapter directory's config, parsed and validated.
LoraConfig read_adapter_config(const fs::path& dir) {
    const fs::path p = dir / kConfigFile;
    const auto file = MappedFile::open(p.string());
    return parse_lora_config(file->bytes(), p.string());
}

}  // namespace

LoraConfig parse_lora_config(std::span<const std::byte> bytes, const std::string& label) {
    LoraConfig c;
    c.label = label;
    // Key order kept: PEFT takes the first pattern key that matches a module.
    c.json = parse_json_bounded<nlohmann::ordered_json>(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), label);
    if (c.json.is_discarded() || !c.json.is_object())
        throw_input_error(label, "", "not a JSON object (expected PEFT's adapter_config.json)");
    const auto& config = c.json;
    const auto* peft_type = member(config, "peft_type");
    if (!peft_type)
        throw_input_error(label, "", "peft_type is missing (PEFT refuses such a config: expected \"LORA\")");
    if (!peft_type->is_string() || peft_type->get<std::string>() != "LORA")
        throw_input_error(
            label, "",
            fmt::format("peft_type {} is not LoRA: only LoRA adapters are read", json_preview(*peft_type)));
    if (config_bool(config, "use_dora", label))
        throw_input_error(label, "",
                          "DoRA adapters (use_dora) are not supported: their merge rescales each column");
    if (const auto* b = member(config, "base_model_name_or_path"); b && b->is_string())
        c.base_model = b->get<std::string>();
    c.rslora = config_bool(config, "use_rslora", label);
    c.fan_in_fan_out = config_bool(config, "fan_in_fan_out", label);
    const auto* r_default = member(config, "r");
    const auto* alpha_default = member(config, "lora_alpha");
    if (!r_default || !r_default->is_number_integer() || r_default->get<std::int64_t>() <= 0)
        throw_input_error(label, "", "'r' is missing or not a positive integer");
    if (!alpha_default) throw_input_error(label, "", "'lora_alpha' is missing");
    c.r = r_default->get<std::int64_t>();
    c.alpha = config_number(*alpha_default, "lora_alpha", label);
    if (const auto* l = member(config, "layers_to_transform")) {
        auto index = [&](const nlohmann::ordered_json& v) {
            if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
                throw_input_error(label, "", "layers_to_transform is not a layer index or a list of them");
            return v.get<std::int64_t>();
        };
        c.layers_to_transform.emplace();
        if (l->is_array()) {
            for (const auto& v : *l) c.layers_to_transform->push_back(index(v));
        } else {
            c.layers_to_transform->push_back(index(*l));
        }
    }
    if (const auto* p = member(config, "layers_pattern")) {
        if (p->is_string()) {
            c.layers_pattern.push_back(p->get<std::string>());
        } else if (p->is_array()) {
            for (const auto& v : *p) {
                if (!v.is_string())
                    throw_input_error(label, "", "layers_pattern is not a string or a list of them");
                c.layers_pattern.push_back(v.get<std::string>());
            }
        } else {
            throw_input_error(label, "", "layers_pattern is not a string or a list of them");
        }
    }
    // The shapes of the rules PEFT reads per module, checked once here rather than per module.
    if (const auto* t = member(config, "target_modules"); t && !t->is_string() && !t->is_array())
        throw_input_error(label, "", "target_modules is neither a list nor a string");
    for (const char* key : {"rank_pattern", "alpha_pattern"})
        if (const auto* v = member(config, key); v && !v->is_object())
            throw_input_error(label, "", fmt::format("'{}' is not an object", key));
    return c;
}

bool LoraConfig::targets(const std::string& module) const { return targeted(json, module, label); }

bool LoraConfig::transforms_layer(const std::string& module) const {
    if (!layers_to_transform) return true;
    std::vector<std::string> comps;
    for (std::size_t start = 0;;) {
        const auto dot = module.find('.', start);
        comps.push_back(module.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    auto digits = [](const std::string& s) {
        return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    };
    // The greedy ".*" of PEFT's expressions takes the last place where the rest matches: the last
    // all-digit component j (followed by another component) whose prefix ends with ".<pattern>".
    std::optional<std::int64_t> layer;
    for (std::size_t j = comps.size() >= 2 ? comps.size() - 2 : 0; j >= 2; --j) {
        if (!digits(comps[j])) continue;
        bool found = layers_pattern.empty();
        if (!found) {
            std::string prefix;
            for (std::size_t i = 0; i < j; ++i) prefix += (i ? "." : "") + comps[i];
            for (const auto& p : layers_pattern)
                if (Pattern(".*\\.(?:" + p + ")", label + ": layers_pattern").full_match(prefix))
                    found = true;
        }
        if (!found) continue;
        if (comps[j].size() > 18) return false;
        layer = std::stoll(comps[j]);
        break;
    }
    return layer && std::find(layers_to_transform->begin(), layers_to_transform->end(), *layer) !=
                        layers_to_transform->end();
}

std::optional<std::int64_t> LoraConfig::rank_for(const std::string& module) const {
    const auto* v = pattern_value(json, "rank_pattern", module, label);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<std::int64_t>() <= 0)
        throw_input_error(label, module,
                          fmt::format("rank_pattern gives r = {}, not a positive integer", v->dump()));
    return v->get<std::int64_t>();
}

double LoraConfig::alpha_for(const std::string& module) const {
    const auto* v = pattern_value(json, "alpha_pattern", module, label);
    return v ? config_number(*v, "alpha_pattern", label) : alpha;
}

bool is_lora_adapter(const std::string& path) {
    // adapter_config.json in any form (a directory, a FIFO, a link to /dev/zero) makes the directory an
    // adapter, whose config is then refused by name: its factors are never read as a model.
    std::error_code ec;
    return fs::is_directory(path, ec) && fs::exists(fs::symlink_status(fs::path(path) / kConfigFile, ec));
}

std::pair<std::string, std::string> split_lora_spec(std::string_view location) {
    for (auto pos = location.rfind('+'); pos != std::string_view::npos && pos > 0;
         pos = location.rfind('+', pos - 1)) {
        const std::string left(location.substr(0, pos)), right(location.substr(pos + 1));
        std::error_code ec;
        if (is_lora_adapter(right) &&
            (fs::exists(left, ec) || looks_like_model_id(left) || left.find('+') != left.npos))
            return {left, right};
    }
    return {"", ""};
}

std::string lora_base_model(const std::string& adapter_dir) {
    return read_adapter_config(adapter_dir).base_model;
}

Checkpoint open_lora_model(std::string name, std::string base_spec, const std::string& adapter_dir) {
    if (base_spec.empty()) {
        base_spec = lora_base_model(adapter_dir);
        std::error_code ec;
        if (base_spec.empty() || (!fs::exists(base_spec, ec) && !looks_like_model_id(base_spec)))
            throw_input_error(
                (fs::path(adapter_dir) / kConfigFile).string(), "",
                fmt::format("base_model_name_or_path '{}' is neither a path nor a model id: give the "
                            "model as BASE+ADAPTER",
                            base_spec));
    }
    // An adapter whose base is (through other adapters) itself would be opened without end: the
    // adapters being opened on this thread, by physical path, and a bound on honest stacks.
    thread_local std::vector<std::string> opening;
    std::error_code ec;
    const auto self = fs::weakly_canonical(fs::absolute(adapter_dir, ec), ec).string();
    const std::string label = (fs::path(adapter_dir) / kConfigFile).string();
    if (std::find(opening.begin(), opening.end(), self) != opening.end())
        throw_input_error(label, "",
                          fmt::format("base_model_name_or_path '{}' leads back to this adapter (an adapter "
                                      "cannot be its own base): give the model as BASE+ADAPTER",
                                      base_spec));
    if (opening.size() >= kMaxAdapterStack)
        throw_input_error(
            label, "",
            fmt::format("more than {} adapters stacked through base_model_name_or_path", kMaxAdapterStack));
    opening.push_back(self);
    struct Pop {
        ~Pop() { opening.pop_back(); }
    } pop;
    const auto base = open_checkpoint(base_spec);
    const auto adapter = open_lora_adapter(adapter_dir, base);
    if (name.empty()) {
        fs::path p = adapter_dir;
        while (p.has_relative_path() && p.filename().empty()) p = p.parent_path();
        name = p.filename().string();
    }
    auto merged = apply_lora(base, adapter, std::move(name));
    merged.warnings.insert(merged.warnings.end(), adapter.warnings.begin(), adapter.warnings.end());
    return merged;
}

namespace {

// The adapter's weight file: adapter_model.safetensors, else adapter_model.bin.
fs::path adapter_weights(const std::string& path) {
    fs::path weights = fs::path(path) / "adapter_model.safetensors";
    std::error_code ec;
    if (!fs::exists(weights, ec)) weights = fs::path(path) / "adapter_model.bin";
    if (!fs::exists(weights, ec))
        throw_input_error(path, "",
                          "adapter directory without adapter_model.safetensors or adapter_model.bin");
    return weights;
}

// Sorts the adapter's tensors: LoRA factors by module (returned), and whole tensors (modules_to_save,
// trained biases) as replacements of the base's tensors of the same name (into ad.replacements).
std::map<std::string, Factors> sort_adapter_tensors(LoraAdapter& ad, const Checkpoint& base) {
    std::map<std::string, Factors> factors;  // module -> A, B
    for (const auto& t : ad.files) {
        if (!t.name.starts_with(kPrefix))
            throw_input_error(t.path(), t.name,
                              fmt::format("adapter tensor name does not start with '{}'", kPrefix));
        const std::string rest = t.name.substr(kPrefix.size());
        auto take = [&](std::string_view suffix, bool is_a, bool embedding) {
            if (!rest.ends_with(suffix)) return false;
            auto& f = factors[rest.substr(0, rest.size() - suffix.size())];
            (is_a ? f.a : f.b) = &t;
            f.embedding = embedding;
            return true;
        };
        if (take(".lora_A.weight", true, false) || take(".lora_B.weight", false, false) ||
            take(".lora_embedding_A", true, true) || take(".lora_embedding_B", false, true))
            continue;
        if (rest.find("lora_magnitude_vector") != std::string::npos)
            throw_input_error(t.path(), t.name, "DoRA magnitude vectors are not supported");
        if (rest.find(".lora_") != std::string::npos)
            throw_input_error(t.path(), t.name,
                              "unknown LoRA tensor (expected lora_A/lora_B or lora_embedding_A/B)");
        // modules_to_save and trained biases: whole tensors, named as the base's.
        std::string target = rest;
        for (const std::string seg : {".modules_to_save.default.", ".modules_to_save."})
            if (const auto p = target.find(seg); p != std::string::npos) target.replace(p, seg.size(), ".");
        const auto& base_t = match_base_tensor(base, target, t.path());
        if (base_t.shape != t.shape)
            throw_input_error(t.path(), t.name,
                              fmt::format("shape differs from the base's '{}' (expected {}, found {})",
                                          base_t.name, shape_string(base_t.shape), shape_string(t.shape)));
        LoraReplacement r{t.name, t};
        r.tensor.name = base_t.name;
        ad.replacements.push_back(std::move(r));
    }
    return factors;
}

// The modules whose fan_in_fan_out flag PEFT overrides (by the base module's type), for the warnings.
struct FlagOverrides {
    std::vector<std::string> on_linear, off_conv1d;
};

// Checks the factors' shapes and types against the base's target and the config's rank and scale.
void check_factors(const LoraModule& m, const TensorInfo& target, const LoraConfig& config,
                   const std::string& label) {
    const std::int64_t r = dim(m.a, 0);
    if (m.a.shape.size() != 2 || m.b.shape.size() != 2 || dim(m.b, 1) != r || r <= 0)
        throw_input_error(
            label, m.module,
            fmt::format("LoRA factors of inconsistent shapes (A {}, B {}; expected [r, in] and [out, r])",
                        shape_string(m.a.shape), shape_string(m.b.shape)));
    if (!dtype_is_float(m.a.dtype) || !dtype_is_float(m.b.dtype) || dtype_is_block(m.a.dtype) ||
        dtype_is_block(m.b.dtype))
        throw_input_error(label, m.module, "LoRA factors must be floating tensors");
    // The delta B·A is [out, in]; stored transposed (fan_in_fan_out, embeddings) it is [in, out].
    const std::int64_t rows = m.transposed ? dim(m.a, 1) : dim(m.b, 0);
    const std::int64_t cols = m.transposed ? dim(m.b, 0) : dim(m.a, 1);
    if (target.shape.size() != 2 || target.shape[0] != rows || target.shape[1] != cols)
        throw_input_error(
            label, m.module,
            fmt::format("LoRA delta does not fit the base's '{}' (expected {}, found [{}, {}]{})",
                        target.name, shape_string(target.shape), rows, cols,
                        m.transposed ? ", stored transposed" : ""));
    if (const auto pr = config.rank_for(m.module)) {
        if (*pr != r)
            throw_input_error(label, m.module,
                              fmt::format("rank_pattern gives r = {} but the factors have rank {}", *pr, r));
    } else if (config.r != r) {
        throw_input_error(label, m.module,
                          fmt::format("the factors' rank differs from the config's r (expected {}, found {})",
                                      config.r, r));
    }
}

// One module's LoRA update as PEFT loads it.
LoraModule lora_module(const std::string& module, const Factors& f, const LoraConfig& config,
                       const Checkpoint& base, const std::string& label, FlagOverrides& overrides) {
    if (!f.a || !f.b)
        throw_input_error(label, module, fmt::format("LoRA module without its {} factor", f.a ? "B" : "A"));
    if (!config.targets(module))
        throw_input_error(label, module, "the module has LoRA factors but target_modules does not name it");
    LoraModule m;
    m.module = module;
    m.a = *f.a;
    m.b = *f.b;
    const auto& target = match_base_tensor(base, module + ".weight", label);
    m.target = target.name;
    // PEFT decides the orientation by the base module, whatever fan_in_fan_out says (it warns and
    // overrides the flag): only a Conv1D weight (GPT-2, stored [in, out]) and embeddings are transposed.
    const bool conv1d = !f.embedding && model::whole_matrix(base.schema, target).transposed;
    m.transposed = f.embedding || conv1d;
    if (!f.embedding && config.fan_in_fan_out != conv1d)
        (conv1d ? overrides.off_conv1d : overrides.on_linear).push_back(module);
    check_factors(m, target, config, label);
    m.rank = static_cast<int>(dim(m.a, 0));
    m.alpha = config.alpha_for(module);
    m.scale = config.rslora ? m.alpha / std::sqrt(static_cast<double>(m.rank))
                            : m.alpha / static_cast<double>(m.rank);
    return m;
}

}  // namespace

// The stages: the config, the weight file, its tensors sorted into factors and whole tensors, each
// module's update as PEFT loads it, and the warnings where PEFT overrides a flag or skips a module.
LoraAdapter open_lora_adapter(const std::string& path, const Checkpoint& base) {
    LoraAdapter ad;
    ad.path = path;
    const std::string label = (fs::path(path) / kConfigFile).string();
    const auto config = read_adapter_config(path);
    ad.config = nlohmann::json::parse(json_text(config.json));
    ad.base_model = config.base_model;
    const auto weights = adapter_weights(path);
    auto file = open_checkpoint(weights.string());
    ad.files = std::move(file.tensors);
    const auto factors = sort_adapter_tensors(ad, base);
    std::vector<std::string> outside_layers;
    FlagOverrides overrides;
    for (const auto& [module, f] : factors) {
        if (f.a && f.b && config.targets(module) && !config.transforms_layer(module)) {
            outside_layers.push_back(module);  // PEFT creates no LoRA layer there: its factors are not loaded
            continue;
        }
        ad.modules.push_back(lora_module(module, f, config, base, weights.string(), overrides));
    }
    auto warn = [&](const std::vector<std::string>& modules, std::string_view what) {
        if (!modules.empty())
            ad.warnings.push_back(fmt::format("{}: {} module{} {} (as PEFT does), e.g. '{}'", label,
                                              modules.size(), modules.size() == 1 ? "" : "s", what,
                                              modules.front()));
    };
    warn(outside_layers,
         "with LoRA factors outside layers_to_transform: not merged, PEFT does not load them");
    warn(overrides.on_linear, "of torch.nn.Linear with fan_in_fan_out set to True: the flag is ignored");
    warn(overrides.off_conv1d,
         "of Conv1D with fan_in_fan_out set to False: merged as Conv1D, the flag is ignored");
    if (ad.modules.empty() && ad.replacements.empty())
        throw_input_error(weights.string(), "",
                          outside_layers.empty()
                              ? "the adapter holds no tensor"
                              : "no LoRA module of the adapter lies in layers_to_transform");
    return ad;
}

namespace {

// W + scale · L·R in f64, stored as f32 (f64 for an f64 base): L·R is B·A ([rows, r]·[r, cols]), or,
// stored transposed, Aᵀ·Bᵀ. The bytes are computed when first read (MappedFile::generated): opening
// an adapter model costs nothing, its content id comes from the base's and the factors' (store), and
// compare's delta-only route reads the factors (t.low_rank) instead.
TensorInfo merged_tensor(const TensorInfo& w, const LoraModule& m, const std::string& label) {
    auto update = std::make_shared<LowRankUpdate>();
    update->base = w;
    update->a = m.a;
    update->b = m.b;
    update->rank = m.rank;
    update->scale = m.scale;
    update->transposed = m.transposed;
    const bool f64 = w.dtype == DType::F64;

    TensorInfo t;
    t.name = w.name;
    t.shape = w.shape;
    t.dtype = f64 ? DType::F64 : DType::F32;
    t.nbytes = static_cast<std::size_t>(w.shape[0] * w.shape[1]) * dtype_size(t.dtype);
    t.low_rank = update;
    t.file = MappedFile::generated(label, t.nbytes, [update, f64](std::span<std::byte> out) {
        const auto merged = low_rank_rows(*update, 0, update->base.shape[0]);
        if (f64) {
            std::memcpy(out.data(), merged.data.data(), out.size());
        } else {
            const std::vector<float> narrow(merged.data.begin(), merged.data.end());
            std::memcpy(out.data(), narrow.data(), out.size());
        }
    });
    return t;
}

}  // namespace

Checkpoint apply_lora(const Checkpoint& base, const LoraAdapter& adapter, std::string name) {
    Checkpoint ck = base;
    ck.name = std::move(name);
    ck.adapter = adapter.path;
    const std::string label = base.path + "+" + adapter.path;
    std::map<std::string, const LoraModule*> by_target;
    for (const auto& m : adapter.modules)
        if (!by_target.emplace(m.target, &m).second)
            throw_input_error(adapter.path, m.target, "two LoRA modules change the same tensor");
    std::map<std::string, const TensorInfo*> replaced;
    for (const auto& r : adapter.replacements) {
        if (by_target.count(r.tensor.name))
            throw_input_error(adapter.path, r.tensor.name,
                              "the adapter both replaces the tensor and adds LoRA factors to it");
        replaced[r.tensor.name] = &r.tensor;
    }
    for (auto& t : ck.tensors) {
        if (const auto it = by_target.find(t.name); it != by_target.end())
            t = merged_tensor(t, *it->second, label);
        else if (const auto r = replaced.find(t.name); r != replaced.end())
            t = *r->second;
    }
    return ck;
}

}  // namespace diffract::formats
