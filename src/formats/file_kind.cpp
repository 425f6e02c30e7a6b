#include "diffract/formats/file_kind.hpp"

#include <fmt/format.h>

namespace diffract::formats {
namespace {

bool starts_with(std::span<const std::byte> b, std::string_view magic) {
    if (b.size() < magic.size()) return false;
    for (std::size_t i = 0; i < magic.size(); ++i)
        if (static_cast<char>(b[i]) != magic[i]) return false;
    return true;
}

std::uint8_t u8(std::span<const std::byte> b, std::size_t i) { return static_cast<std::uint8_t>(b[i]); }

// torch.save before 1.6: a pickle of the magic number 0x1950a86a20f9469cfc6c (LONG1 of 10 bytes).
constexpr std::string_view kLegacyTorch = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";

}  // namespace

FileKind detect_file_kind(std::span<const std::byte> head, std::size_t file_size) {
    if (starts_with(head, "GGUF")) return FileKind::gguf;
    if (starts_with(head, "PK\x03\x04")) {
        // The first local header's name: numpy writes "<array>.npy" entries, torch "<folder>/data.pkl".
        if (head.size() >= 30) {
            const std::size_t n = u8(head, 26) | (std::size_t{u8(head, 27)} << 8);
            if (head.size() >= 30 + n) {
                const std::string_view name(reinterpret_cast<const char*>(head.data() + 30), n);
                if (name.ends_with(".npy")) return FileKind::numpy_npz;
            }
        }
        return FileKind::zip;
    }
    if (starts_with(head, "PK\x05\x06")) return FileKind::zip;  // an empty zip archive
    // Before the pickle test: a safetensors header length whose low byte is 0x80 (e.g. 1408 = 0x580)
    // starts like a pickle's PROTO opcode, while a pickle's first 8 bytes never read as a length that
    // fits the file followed by '{'.
    if (head.size() >= 9) {
        std::uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | u8(head, static_cast<std::size_t>(i));
        if (n >= 2 && n <= file_size - 8 && static_cast<char>(head[8]) == '{') return FileKind::safetensors;
    }
    if (starts_with(head, kLegacyTorch)) return FileKind::legacy_torch;
    if (head.size() >= 2 && u8(head, 0) == 0x80 && u8(head, 1) >= 2 && u8(head, 1) <= 5)
        return FileKind::pickle;
    if (starts_with(head, "\x93NUMPY")) return FileKind::numpy_npy;
    if (starts_with(head, "\x89HDF\r\n\x1a\n")) return FileKind::hdf5;
    // ONNX ModelProto: field 1 (ir_version, a small varint) first, then producer_name (2), graph (7),
    // opset_import (8) or another early field as a length-delimited record.
    if (head.size() >= 4 && u8(head, 0) == 0x08 && u8(head, 1) >= 1 && u8(head, 1) <= 30) {
        const auto tag = u8(head, 2);
        if ((tag & 7) == 2 && (tag >> 3) >= 2 && (tag >> 3) <= 20) return FileKind::onnx;
    }
    return FileKind::unknown;
}

std::string unsupported_kind_message(FileKind kind, std::span<const std::byte> head) {
    switch (kind) {
        case FileKind::safetensors:
        case FileKind::gguf:
        case FileKind::zip:
            return "";
        case FileKind::numpy_npz:
            return "a NumPy .npz archive, not a checkpoint diffract reads; save the arrays as safetensors "
                   "(safetensors.numpy.save_file) with their tensor names";
        case FileKind::legacy_torch:
            return "a legacy torch.save file (PyTorch < 1.6), which only pickle code can read and diffract "
                   "never "
                   "executes; convert it once where you trust it: python -c \"import torch; "
                   "torch.save(torch.load('IN', weights_only=True), 'OUT.bin')\" (or save it as safetensors)";
        case FileKind::pickle:
            return "a plain Python pickle, not a torch.save zip archive; diffract never unpickles arbitrary "
                   "objects: save the state dict with torch.save (PyTorch >= 1.6) or as safetensors";
        case FileKind::numpy_npy:
            return "a NumPy .npy array, not a checkpoint; save named arrays as safetensors "
                   "(safetensors.numpy.save_file)";
        case FileKind::hdf5:
            return "an HDF5 file (Keras / TensorFlow .h5 weights?), which diffract does not read; convert it "
                   "to "
                   "safetensors (e.g. transformers' from_pretrained(..., from_tf=True) then "
                   "save_pretrained(..., safe_serialization=True))";
        case FileKind::onnx:
            return "an ONNX model (protobuf), which diffract does not read; export its initializers as "
                   "safetensors "
                   "(onnx.numpy_helper.to_array + safetensors.numpy.save_file) or use the original "
                   "checkpoint";
        case FileKind::unknown:
            break;
    }
    std::string bytes;
    for (std::size_t i = 0; i < head.size() && i < 8; ++i)
        bytes += fmt::format("{}{:02x}", i ? " " : "", static_cast<unsigned>(head[i]));
    return fmt::format(
        "not a checkpoint format diffract reads (safetensors, GGUF, torch.save zip); first bytes: {}",
        bytes.empty() ? "none (empty file)" : bytes);
}

}  // namespace diffract::formats
