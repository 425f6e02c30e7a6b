// PyTorch checkpoints (torch.save since PyTorch 1.6), read without executing anything.
//
// A torch.save file is a zip archive under one top-level folder <prefix>/ (the file's stem, or
// "archive"):
//   <prefix>/data.pkl        a pickle of the saved object; each tensor storage appears as a
//                            persistent id ('storage', torch.<T>Storage, key, location, numel)
//   <prefix>/data/<key>      the storage's bytes, STORED (uncompressed), aligned to 64 bytes
//   <prefix>/byteorder       "little" or "big" (absent in files older than PyTorch 2.1: little)
//   <prefix>/version, <prefix>/.data/...   format bookkeeping, not read
//
// The zip directory is parsed and validated (zip_directory.cpp), data.pkl is run through a restricted
// unpickler that knows only the opcodes and the allow-listed globals a state dict needs and refuses
// any other global by name (pickle_reader.cpp), and the tensors are views of the stored entries
// (pytorch_reader.cpp). See docs/formats/pytorch.md for the allow-list and the rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/core/tensor.hpp"

namespace diffract::formats {

// One entry of a zip archive's central directory, checked against its local header.
struct ZipEntry {
    std::string name;
    std::uint16_t method = 0;  // 0 STORED, 8 DEFLATE, ...
    std::uint32_t crc32 = 0;
    std::uint64_t local_header_offset = 0;
    std::uint64_t data_offset = 0;  // first byte of the entry's (possibly compressed) data
    std::uint64_t compressed_size = 0;
    std::uint64_t size = 0;  // uncompressed
};

// The entries of the zip archive `file` (end of central directory, zip64 records when present, the
// central directory, each local header), in central-directory order. Validated: signatures, one
// disk, every header and data range inside the file and before the central directory, entries
// disjoint, STORED entries of equal compressed and uncompressed size, no encryption, names
// non-empty, unique, relative and without "..". `label` (the path) prefixes every error. Throws
// InputError.
std::vector<ZipEntry> parse_zip_directory(std::span<const std::byte> file, const std::string& label);

// A tensor as data.pkl describes it: the storage it views and where.
struct PickledTensor {
    std::string name;  // its key in the state dict
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> stride;  // in elements
    std::uint64_t storage_offset = 0;  // in elements
    std::string storage_key;           // the archive entry <prefix>/data/<key>
    std::uint64_t storage_bytes = 0;   // from the persistent id: numel x element size
};

// Runs the pickle `bytes` (data.pkl) through the restricted unpickler and returns the tensors of the
// state dict it holds (docs/formats/pytorch.md: the top-level dict when it holds tensors, else the
// one nested dict that does, preferring "state_dict", "model", "module"), in pickle order. Nothing
// is executed: a global outside the allow-list, an opcode outside the supported set, a malformed
// argument or a value that is not a state dict is an InputError naming `label` (and the tensor).
std::vector<PickledTensor> parse_torch_pickle(std::span<const std::byte> bytes, const std::string& label);

// A tensor of a parsed archive: where its bytes are, or (strided views) how to gather them.
struct PytorchTensor {
    PickledTensor pickled;
    std::uint64_t storage_begin = 0;  // absolute offset of the storage entry's data in the file
    bool contiguous = true;           // row-major: bytes are [offset, offset + nbytes)
    std::uint64_t offset = 0;         // absolute; for contiguous tensors
    std::uint64_t nbytes = 0;         // numel x element size
};

// The archive `file` validated and its tensors located (every byte each tensor reads lies inside its
// storage entry, which lies inside the file). Throws InputError naming `label` and the tensor.
std::vector<PytorchTensor> parse_pytorch_archive(std::span<const std::byte> file, const std::string& label);

// Maps a torch.save file read-only and returns views of its tensors: contiguous tensors point into
// the mapping; strided views (a transposed or sliced tensor saved as such) are gathered into memory,
// at most the file's size in all.
std::vector<TensorInfo> open_pytorch(const std::string& path);

}  // namespace diffract::formats
