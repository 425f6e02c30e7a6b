#include "diffract/formats/memory_checkpoint.hpp"

#include <set>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract::formats {
namespace {

constexpr std::string_view kPrefix = "memory:";

}  // namespace

Checkpoint memory_checkpoint(std::string name, std::vector<MemoryTensor> tensors, nlohmann::json config) {
    Checkpoint ck;
    ck.name = std::move(name);
    ck.path = std::string(kPrefix) + ck.name;
    ck.format = CheckpointFormat::safetensors;  // the same tensor conventions: safetensors dtypes, row-major,
                                                // HF names
    ck.config = std::move(config);
    std::set<std::string> seen;
    for (auto& m : tensors) {
        if (m.name.empty()) throw_input_error(ck.path, "", "a tensor has an empty name");
        if (!seen.insert(m.name).second) throw_input_error(ck.path, m.name, "duplicate tensor name");
        if (dtype_is_block(m.dtype))
            throw_input_error(ck.path, m.name, "block-quantised dtypes cannot be given in memory");
        TensorInfo t;
        t.name = m.name;
        t.dtype = m.dtype;
        t.shape = m.shape;
        for (auto d : t.shape)
            if (d < 0)
                throw_input_error(ck.path, m.name,
                                  fmt::format("negative dimension in shape {}", shape_string(t.shape)));
        const auto expected = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
        if (m.nbytes != expected)
            throw_input_error(
                ck.path, m.name,
                fmt::format("byte count does not match dtype {} and shape {} (expected {}, found {})",
                            dtype_name(t.dtype), shape_string(t.shape), expected, m.nbytes));
        t.file = MappedFile::from_memory(ck.path, std::move(m.owner), m.data, m.nbytes);
        t.offset = 0;
        t.nbytes = m.nbytes;
        ck.tensors.push_back(std::move(t));
    }
    ck.schema = model::schema_from_config(ck.config, ck.path + " (config)");
    return ck;
}

}  // namespace diffract::formats
