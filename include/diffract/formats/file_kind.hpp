// What a file is, from its first bytes: the one place where checkpoint files are told apart, so that
// a file in a format diffract does not read is refused with a message that names the format and
// says what to do, instead of a parser's complaint about bytes it was never meant to read.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace diffract::formats {

enum class FileKind {
    safetensors,   // u64 little-endian header length, then '{'
    gguf,          // "GGUF"
    zip,           // "PK\x03\x04": a torch.save archive, or another zip (told apart by its entries)
    numpy_npz,     // a zip whose first entry is a .npy file
    legacy_torch,  // a pickle that starts with torch's magic number (torch.save before PyTorch 1.6)
    pickle,        // any other pickle (protocol 2 to 5)
    numpy_npy,     // "\x93NUMPY"
    hdf5,          // "\x89HDF\r\n\x1a\n" (Keras / TensorFlow .h5)
    onnx,          // an ONNX ModelProto (protobuf: ir_version first)
    unknown,
};

// The kind of a file from its first bytes (all of them or at least the first 64) and its total size.
FileKind detect_file_kind(std::span<const std::byte> head, std::size_t file_size);

// For a kind diffract does not read (numpy, pickles, HDF5, ONNX, unknown): what the file is and what
// to do, as the tail of an InputError message. Empty for the kinds it reads.
std::string unsupported_kind_message(FileKind kind, std::span<const std::byte> head);

}  // namespace diffract::formats
