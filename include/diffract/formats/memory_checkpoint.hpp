// Checkpoints held in memory: tensors that point into caller-owned buffers (numpy arrays, a PyTorch
// state_dict). They go wherever an opened checkpoint goes (analyze, compare, edits).
//
// A buffer is never copied: each tensor's MappedFile (MappedFile::from_memory) holds a reference to
// the buffer's owner, so the buffer lives as long as any view of it.
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

}  // namespace diffract::formats
