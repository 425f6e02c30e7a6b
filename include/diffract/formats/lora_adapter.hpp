// LoRA adapters as PEFT writes them: a directory with adapter_config.json and
// adapter_model.safetensors, whose tensors are
//   base_model.model.<module>.lora_A.weight            [r, in]    (lora_embedding_A: [r, vocab])
//   base_model.model.<module>.lora_B.weight            [out, r]   (lora_embedding_B: [dim, r])
//   base_model.model.<module>.<param>                  a whole tensor replacing the base's
//                                                      (modules_to_save, trained biases)
// A model given as BASE+ADAPTER (or an adapter directory whose base_model_name_or_path is a path or a
// model of the local HF cache) has the weights W + scale · B·A of PEFT's merge:
//   scale = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora; r and lora_alpha per module from
//   rank_pattern / alpha_pattern (PEFT's rule: a key matches a module name that equals it or ends
//   with "." + it, as a regular expression), r checked against the factors' shapes;
//   fan_in_fan_out: the base stores the weight [in, out] (GPT-2's Conv1D), so the delta is (B·A)ᵀ;
//   embeddings: W[vocab, dim] += scale · (B·A)ᵀ.
// Module names are matched to the base's tensors exactly, else by the one base tensor whose name
// ends with the module's path less its leading components (an adapter trained on
// BertForSequenceClassification names "bert.encoder...", a BertModel checkpoint "encoder..."); a
// module that matches no tensor, or more than one, is an InputError. DoRA and non-LoRA PEFT methods
// are refused with one line saying so.
//
// The merged tensors are materialised in memory in f32 (f64 for an f64 base), computed in f64 from
// the stored values: every command sees the adapter model as an ordinary checkpoint, and every
// result is keyed by the merged bytes.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/core/tensor.hpp"
#include "diffract/formats/checkpoint.hpp"

namespace diffract::formats {

struct LoraModule {
    std::string module;  // the adapter's module path ("bert.encoder.layer.0.attention.self.query")
    std::string target;  // the base tensor it changes ("encoder.layer.0.attention.self.query.weight")
    TensorInfo a, b;     // lora_A [r, in] and lora_B [out, r] (embeddings: [r, vocab], [dim, r])
    int rank = 0;
    double alpha = 0;
    double scale = 0;         // alpha / r, or alpha / sqrt(r) with rslora
    bool transposed = false;  // the delta is (B·A)ᵀ: fan_in_fan_out, or an embedding
};

// A whole tensor of the adapter that replaces the base's (modules_to_save, a trained bias).
struct LoraReplacement {
    std::string key;    // its name in the adapter file ("base_model.model.bert.pooler.dense.weight")
    TensorInfo tensor;  // named as the base's tensor it replaces
};

struct LoraAdapter {
    std::string path;               // the adapter directory
    nlohmann::json config;          // adapter_config.json
    std::string base_model;         // base_model_name_or_path ("" if none)
    std::vector<TensorInfo> files;  // keeps the weight file's tensors (and its mapping) alive
    std::vector<LoraModule> modules;
    std::vector<LoraReplacement> replacements;
    std::vector<std::string> warnings;  // PEFT's: a flag it overrides, factors it does not load
};

// adapter_config.json, validated from its bytes: what PEFT reads of it (peft_type LORA, no DoRA, r,
// lora_alpha, rslora, fan_in_fan_out, base_model_name_or_path) and its per-module rules. Every
// pattern runs in linear time (core/pattern.hpp). Throws InputError naming `label`.
struct LoraConfig {
    nlohmann::ordered_json json;  // key order kept: PEFT takes the first pattern key that matches
    std::string label;            // the file, for messages
    std::string base_model;       // base_model_name_or_path ("" if none)
    bool rslora = false, fan_in_fan_out = false;
    std::int64_t r = 0;
    // layers_to_transform (an index or a list; none: every layer) and layers_pattern (the names of the
    // layer containers; none: PEFT's default rule), as PEFT's check_target_module_exists applies them.
    std::optional<std::vector<std::int64_t>> layers_to_transform;
    std::vector<std::string> layers_pattern;
    double alpha = 0;
    // target_modules: a list of names a module equals or ends with as ".name" (suffix match), a
    // regular expression the whole module name matches (re.fullmatch), or "all-linear"; none: all.
    bool targets(const std::string& module) const;
    // rank_pattern / alpha_pattern: the first key K with (.*\.)?(K) matching the whole module name.
    std::optional<std::int64_t> rank_for(const std::string& module) const;
    double alpha_for(const std::string& module) const;  // lora_alpha when no alpha_pattern key matches
    // Whether PEFT adapts the module under layers_to_transform: its layer index is the number after the
    // last ".<pattern>." (re.match(r".*\.{pattern}\.(\d+)\.")), or with no layers_pattern after the last
    // ".<any component>." (r".*\.[^.]*\.(\d+)\."); a module without one is not adapted.
    bool transforms_layer(const std::string& module) const;
};
LoraConfig parse_lora_config(std::span<const std::byte> bytes, const std::string& label);

// Whether `path` is a directory holding adapter_config.json.
bool is_lora_adapter(const std::string& path);

// Reads and validates the adapter directory and matches its modules to `base`'s tensors (shapes
// checked: A's columns and B's rows against the target's). Throws InputError.
LoraAdapter open_lora_adapter(const std::string& path, const Checkpoint& base);

// `base` with the adapter merged: every target and replacement materialised in memory, the rest
// still views of the base's files. The result's path and format are the base's; its name is given.
Checkpoint apply_lora(const Checkpoint& base, const LoraAdapter& adapter, std::string name);

// The base an adapter directory names (base_model_name_or_path), "" if none.
std::string lora_base_model(const std::string& adapter_dir);

// Opens BASE+ADAPTER: the base (any spec open_checkpoint reads; "" = the adapter's
// base_model_name_or_path, as a path or a model of the local HF cache) with the adapter merged,
// named `name` (default: the adapter directory's name).
Checkpoint open_lora_model(std::string name, std::string base_spec, const std::string& adapter_dir);

// "BASE+ADAPTER" split at the '+' whose right side is an adapter directory ({"", ""} if none is).
std::pair<std::string, std::string> split_lora_spec(std::string_view location);

}  // namespace diffract::formats
