// Writing a Hugging Face model directory: sharded safetensors with an index, config and tokenizer
// files copied from a source directory. Streaming: tensors are produced one at a time into a buffer
// of one tensor's size, so memory stays bounded by the largest tensor, whatever the model's size.
//
// Atomic: everything is written under a temporary sibling directory which is renamed to the
// target only once complete; on any failure the temporary directory is removed and the target does
// not exist. The target must not exist and must not be (or contain, or lie inside) an input.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/core/dtype.hpp"

namespace diffract::formats {

struct TensorSpec {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::uint64_t nbytes() const;
};

// Fills `out` (exactly spec.nbytes() bytes) with the tensor's stored bytes.
using TensorProducer = std::function<void(const TensorSpec& spec, std::span<std::byte> out)>;

struct WriteOptions {
    std::uint64_t max_shard_bytes = 5'000'000'000ULL;  // as transformers' save_pretrained default
    std::string weights_file =
        "model.safetensors";  // the name of a single shard (PEFT: adapter_model.safetensors)
    // A model directory whose files and folders are all carried into the output (tokenizer, chat
    // template, README, custom code, sentence-transformers modules, ...) except weight files in any
    // format and their indexes (they hold the input's weights, not the output's: is_weight_file) and
    // hidden entries (.git, .cache). Symbolic links (HF cache snapshots) are copied as their targets.
    std::string copy_files_from;
    nlohmann::json config;  // written as config.json when not null (overrides the copied one)
    std::map<std::string, std::string> metadata = {{"format", "pt"}};
    std::vector<std::string> inputs;  // paths that must not be overwritten
    // Extra small files to place in the directory (name -> contents), e.g. the heads a rewind chose.
    std::map<std::string, std::string> extra_files;
    // Written as diffract_edit.json when not null: which edit made the checkpoint, from what. The
    // writer adds "not_carried": the weight files of copy_files_from that were left out.
    nlohmann::json provenance;
    // Completes the provenance once every tensor is written (counts only known then).
    std::function<void(nlohmann::json& provenance)> complete_provenance;
    // Weight files of copy_files_from that the output replaces (relative paths): not listed as
    // "not_carried", which names only weights in other formats (.bin, .onnx, ...) left behind.
    std::vector<std::string> replaced_weight_files;
};

inline constexpr const char* kProvenanceFile = "diffract_edit.json";

// Writes the directory `out_dir`. Tensors are written in the order given.
void write_checkpoint(const std::string& out_dir, const std::vector<TensorSpec>& tensors,
                      const TensorProducer& produce, const WriteOptions& options);

// The directory part shared by every checkpoint writer (safetensors here, GGUF in gguf_writer.hpp):
// atomically, carries options.copy_files_from, writes the provenance, config and extra files, then
// calls `write_weights(tmp_dir)` to write the weight files into the temporary directory.
void write_model_directory(const std::string& out_dir, const WriteOptions& options,
                           const std::function<void(const std::string& tmp_dir)>& write_weights);

// Whether a file of a model directory (path relative to it) holds weights or indexes them: the
// files an edited checkpoint does not carry over from its input.
bool is_weight_file(const std::string& relative_path);

// Atomic directory creation, shared by every writer of directories: `fill(tmp_dir)` populates a
// temporary sibling of `out_dir`, which is then renamed into place.
void write_directory_atomically(const std::string& out_dir, const std::vector<std::string>& inputs,
                                const std::function<void(const std::string& tmp_dir)>& fill);

}  // namespace diffract::formats
