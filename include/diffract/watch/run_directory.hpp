// The checkpoints of a training run as frameworks write them, found in the run's directory:
//   checkpoint-<step>/      Hugging Face Trainer: a full model (model.safetensors, shards, or
//                           pytorch_model.bin) or a PEFT adapter (adapter_config.json and
//                           adapter_model.safetensors); its step is trainer_state.json's global_step.
//                           Trainer writes that file after the weights, so a checkpoint-<step>/
//                           without it is still being written.
//   NAME/                   a model directory whose name carries a step ("step_500", "global_step500",
//                           "iter_0001000", "ckpt-3": core/step_name.hpp)
//   NAME.safetensors|.gguf|.bin|.pt|.pth
//                           a one-file checkpoint whose name carries a step ("model-step500.gguf")
// Anything else (logs, runs/, the run's final model without a step, a shard "…-00001-of-00002…") is
// not a checkpoint of the run and is passed over.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/core/mapped_file.hpp"

namespace diffract::watch {

// What a checkpoint's files look like now: each regular file's name and identity as the store's rules
// read it (device, inode, size, modification and change times: a re-save that keeps the size and
// sets the old mtime back still changes the inode or the ctime). Two equal signatures taken apart
// mean nothing wrote in between.
struct FileSignature {
    struct File {
        std::string name;
        FileIdentity identity;
        bool operator==(const File&) const = default;
    };
    std::vector<File> files;
    std::int64_t newest_ns = 0;  // the latest modification or change time among them
    bool operator==(const FileSignature&) const = default;
};

struct FoundCheckpoint {
    std::int64_t step = 0;
    std::string name;  // its entry in the run directory ("checkpoint-500", "model-step500.gguf")
    std::string path;
    bool trainer = false;  // checkpoint-<step>/ (Trainer's layout)
    bool adapter = false;  // a PEFT adapter checkpoint: read as BASE+ADAPTER
    FileSignature signature;
    // Why it cannot be read yet ("" when it can be tried): no trainer_state.json yet, no weights yet.
    std::string not_ready;
    // Why it is no checkpoint at all although named like one ("" when it may be): a link to a directory
    // that holds the run directory ("checkpoint-9 -> /"). The watch warns and leaves it out.
    std::string ignored;
};

// The checkpoints in `run_dir`, by step. Throws InputError when `run_dir` is not a directory, and when
// a trainer_state.json older than `settle_seconds` does not hold a global_step (one still being
// written is `not_ready`).
std::vector<FoundCheckpoint> find_checkpoints(const std::string& run_dir, double settle_seconds);

// The global_step of a trainer_state.json's text: a JSON object whose "global_step" is a non-negative
// integer; nullopt for anything else (a file still being written, or not Trainer's).
std::optional<std::int64_t> parse_trainer_state(std::string_view text);

// The step a run-directory entry's name carries ("checkpoint-500", "step_300", "model-step7.gguf"'s
// stem), exactly; nullopt for names without one (and for token counts).
std::optional<std::int64_t> step_in_name(const std::string& name);

// Whether `dir` holds a model's weights itself (then it is one checkpoint, not a run of them).
bool is_model_directory(const std::filesystem::path& dir);

// The signature of `path` (a file, or a directory's top-level files); empty when it is gone.
FileSignature file_signature(const std::filesystem::path& path);

// Seconds since the newest modification in `signature`.
double seconds_since_change(const FileSignature& signature);

}  // namespace diffract::watch
