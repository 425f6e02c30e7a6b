// Opening a checkpoint, whatever its form, as one list of tensor views.
//
// A model is named on the command line as
//   PATH                   a .safetensors file, a .gguf file, a torch.save file (.bin, .pt, .pth:
//                          formats/pytorch.hpp), or an HF model directory (model.safetensors, or
//                          shards listed by model.safetensors.index.json; else pytorch_model.bin,
//                          or shards listed by pytorch_model.bin.index.json; else one .gguf)
// A file is read by what its bytes are (formats/file_kind.hpp); a format diffract does not read
// (ONNX, HDF5, NumPy, plain or legacy pickles) is refused with what it is and what to do.
//   org/name[@revision]    a model in the local Hugging Face cache (offline; see hf_cache.hpp)
//   BASE+ADAPTER           BASE with a PEFT LoRA adapter directory merged (see lora_adapter.hpp);
//                          an adapter directory alone names its base in base_model_name_or_path
//   NAME=...               any of the above, displayed as NAME
// Files are mapped read-only; nothing is read until a tensor's bytes are.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/core/tensor.hpp"
#include "diffract/model/schema.hpp"

namespace diffract::formats {

// What a checkpoint's weights were read from; its name (format_name) only at the edges (inspect, Python).
enum class CheckpointFormat { unknown, safetensors, pytorch, gguf };
std::string_view format_name(CheckpointFormat format);  // "safetensors" | "pytorch" | "gguf" | "unknown"

struct Checkpoint {
    std::string name;  // display name: NAME= if given, else the directory's (or file's) base name
    std::string path;  // resolved file or directory
    CheckpointFormat format = CheckpointFormat::unknown;
    nlohmann::json config;            // config.json; for GGUF, head geometry mapped to HF keys; null if none
    std::vector<TensorInfo> tensors;  // in file order, shard by shard
    std::map<std::string, std::string> unsupported_types;  // GGUF tensors whose type is not decoded
    model::ModelSchema schema;
    // Quantized safetensors (formats/quantized_safetensors.hpp): the scheme as inspect names it ("" when
    // not quantized), and, when the checkpoint's scheme is one diffract does not decode, the one line
    // that says so (analyses refuse it; inspect shows it).
    std::string quantization;
    std::string undecoded_quantization;
    // How many packed mixture-of-experts tensors were split into one matrix per expert
    // (formats/packed_experts.hpp): edits, which write the stored layout, refuse such checkpoints.
    int packed_experts = 0;
    std::string adapter;  // the LoRA adapter directory merged into the weights ("" if none)
    // What reading it found that a user must hear, whatever the command (an adapter flag PEFT overrides,
    // factors PEFT does not load): printed by inspect, added to analyze's and compare's warnings.
    std::vector<std::string> warnings;

    const TensorInfo* find(std::string_view tensor_name) const;
    // How to open it again, as the store records it: its path, or BASE+ADAPTER for an adapter model
    // (whose `path` is its base's).
    std::string source() const { return adapter.empty() ? path : path + "+" + adapter; }
    // Directory holding config/tokenizer files to copy into edited checkpoints ("" for a lone file).
    std::string directory() const;
    // The paths this model was read from (its file or directory, and its LoRA adapter's directory):
    // what an output must never replace or sit inside.
    std::vector<std::string> input_paths() const;
};

// Opens a checkpoint. The path (and every file the opener reads) must be a regular file or a
// directory: a FIFO, socket or device is an InputError, never a read that blocks.
// The input paths of every one of `models` (Checkpoint::input_paths), in order: what an output written
// from them must never replace or sit inside.
std::vector<std::string> input_paths(const std::vector<const Checkpoint*>& models);

Checkpoint open_checkpoint(std::string_view spec);

// config.json from its bytes: valid JSON and an object, else InputError naming `label`.
nlohmann::json parse_config_json(std::span<const std::byte> bytes, const std::string& label);

// The tensor of `ck` that pairs with `t` of `own`: the one of the same name or, when the two name
// their tensors differently (a Hugging Face checkpoint and its GGUF conversion), the one tensor of the
// same layer, role, embedding kind and weight/bias as the schema classifies both namings, unique on
// both sides. Norms and unclassified tensors pair by name only. nullptr when there is none.
const TensorInfo* counterpart(const Checkpoint& ck, const Checkpoint& own, const TensorInfo& t);

// How `t` of `own` pairs with its counterpart in `ck`: the one alignment rule of compare and the edit
// driver, which differ only in what they do with a mismatch (compare refuses or skips it, an edit
// carries the tensor from its primary or refuses).
enum class PairIssue {
    none,       // paired
    missing,    // no counterpart
    shape,      // the counterpart's shape differs
    not_float,  // `t` is floating, the counterpart is not
    undecoded,  // the counterpart is of a type that is not decoded (a GGUF type:
                // Checkpoint::unsupported_types)
};
struct TensorPair {
    const TensorInfo* other = nullptr;  // null only when missing
    PairIssue issue = PairIssue::none;
};
TensorPair align(const Checkpoint& ck, const Checkpoint& own, const TensorInfo& t);

// Splits "NAME=PATH" (NAME without '/'); returns {"", spec} when there is no name.
std::pair<std::string, std::string> split_model_name(std::string_view spec);

}  // namespace diffract::formats
