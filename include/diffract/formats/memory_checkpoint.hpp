// Checkpoints held in memory: tensors that point into caller-owned buffers (numpy arrays, a PyTorch
// state_dict), and a registry that lets every command open them by spec.
//
// A buffer is never copied: each tensor's MappedFile (MappedFile::from_memory) holds a reference to
// the buffer's owner, so the buffer lives as long as any view of it. Registered checkpoints are opened
// by the spec "memory:<id>" that register_checkpoint returns (with "NAME=memory:<id>" renaming it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/core/dtype.hpp"
#include "diffract/formats/checkpoint.hpp"

namespace diffract::formats {

struct MemoryTensor {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;    // row-major, C-contiguous data
    std::shared_ptr<const void> owner;  // keeps `data` alive
    const std::byte* data = nullptr;
    std::size_t nbytes = 0;
};

// A checkpoint of in-memory tensors, in the given order: format "safetensors" (its tensors follow the
// safetensors conventions, so every command and edit accepts it), path "memory:<name>". `config` is an HF
// config.json (or null) and gives the head geometry as for a directory. Throws InputError for an empty or
// duplicate tensor name, a negative dimension, a block-quantised dtype, or a byte count that does not match
// the shape.
Checkpoint memory_checkpoint(std::string name, std::vector<MemoryTensor> tensors,
                             nlohmann::json config = nullptr);

// Makes `ck` openable by open_model under the returned spec ("memory:<id>") until unregistered.
std::string register_checkpoint(Checkpoint ck);
void unregister_checkpoint(const std::string& spec);

// Opens a spec: a registered checkpoint ("memory:<id>", "NAME=memory:<id>"), else open_checkpoint.
Checkpoint open_model(std::string_view spec);

// Registers a checkpoint for the lifetime of the object.
class ScopedRegistration {
public:
    explicit ScopedRegistration(Checkpoint ck) : spec_(register_checkpoint(std::move(ck))) {}
    ~ScopedRegistration() { unregister_checkpoint(spec_); }
    ScopedRegistration(const ScopedRegistration&) = delete;
    ScopedRegistration& operator=(const ScopedRegistration&) = delete;
    const std::string& spec() const { return spec_; }

private:
    std::string spec_;
};

}  // namespace diffract::formats
