// A tensor stored in a checkpoint file: name, dtype, shape and a view of its bytes in the mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "diffract/core/dtype.hpp"
#include "diffract/core/mapped_file.hpp"

namespace diffract {

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;  // row-major, outermost first (as safetensors / torch)
    std::shared_ptr<const MappedFile> file;
    std::size_t offset = 0;  // absolute byte offset of the data in `file`
    std::size_t nbytes = 0;

    std::int64_t numel() const;
    std::span<const std::byte> bytes() const { return file->bytes().subspan(offset, nbytes); }
    // The file's path ("" for a tensor not backed by a file, as in tests and in-memory models).
    const std::string& path() const;
};

// The shape as "[a, b, c]".
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace diffract
