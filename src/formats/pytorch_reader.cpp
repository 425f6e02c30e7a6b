// torch.save archives: the zip directory and data.pkl tied together into tensor views.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/formats/pytorch.hpp"

namespace diffract::formats {
namespace {

std::string_view entry_text(std::span<const std::byte> file, const ZipEntry& e) {
    return {reinterpret_cast<const char*>(file.data() + e.data_offset), static_cast<std::size_t>(e.size)};
}

// The archive's folder: the one <prefix>/data.pkl (torch's reader takes the first record's folder).
std::string archive_prefix(const std::vector<ZipEntry>& entries, const std::string& label) {
    std::vector<std::string> prefixes;
    bool npy = false;
    for (const auto& e : entries) {
        const auto slash = e.name.find('/');
        if (slash != std::string::npos && e.name.find('/', slash + 1) == std::string::npos &&
            e.name.compare(slash, std::string::npos, "/data.pkl") == 0)
            prefixes.push_back(e.name.substr(0, slash + 1));
        npy = npy || e.name.ends_with(".npy");
    }
    if (prefixes.empty())
        throw_input_error(label, "",
                          npy ? "a NumPy .npz archive, not a checkpoint diffract reads; save the arrays as "
                                "safetensors (safetensors.numpy.save_file) with their tensor names"
                              : "a zip archive but not a torch.save checkpoint (no <folder>/data.pkl entry)");
    if (prefixes.size() > 1)
        throw_input_error(
            label, "",
            fmt::format("zip archive holds {} torch data.pkl folders (expected 1)", prefixes.size()));
    return prefixes.front();
}

bool contiguous(const PickledTensor& t) {
    std::uint64_t expected = 1;
    for (auto d = t.shape.size(); d-- > 0;) {
        if (t.shape[d] != 1 && static_cast<std::uint64_t>(t.stride[d]) != expected) return false;
        expected *= static_cast<std::uint64_t>(t.shape[d]);  // no overflow: numel was checked first
    }
    return true;
}

PytorchTensor locate(const PickledTensor& p, const ZipEntry& storage, const std::string& label) {
    auto fail = [&](const std::string& what) { throw_input_error(label, p.name, what); };
    const std::uint64_t item = dtype_size(p.dtype);
    std::uint64_t numel = 1;
    for (auto d : p.shape) {
        if (d < 0) fail(fmt::format("negative dimension in shape {}", shape_string(p.shape)));
        if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel))
            fail(fmt::format("shape {} overflows", shape_string(p.shape)));
    }
    for (auto s : p.stride)
        if (s < 0) fail(fmt::format("negative stride in {}", shape_string(p.stride)));
    PytorchTensor t;
    t.pickled = p;
    t.storage_begin = storage.data_offset;
    if (__builtin_mul_overflow(numel, item, &t.nbytes) || t.nbytes > p.storage_bytes)
        fail(fmt::format("shape {} needs more bytes than its storage '{}' holds ({} bytes)",
                         shape_string(p.shape), p.storage_key, p.storage_bytes));
    // Every element read lies inside the storage: the last one is at offset + sum((size - 1) * stride).
    std::uint64_t last = p.storage_offset, end_bytes = 0;
    for (std::size_t d = 0; d < p.shape.size() && numel > 0; ++d) {
        std::uint64_t span = 0;
        if (__builtin_mul_overflow(static_cast<std::uint64_t>(p.shape[d] - 1),
                                   static_cast<std::uint64_t>(p.stride[d]), &span) ||
            __builtin_add_overflow(last, span, &last))
            fail(fmt::format("strides {} overflow", shape_string(p.stride)));
    }
    if (__builtin_add_overflow(last, numel > 0 ? 1 : 0, &last) ||
        __builtin_mul_overflow(last, item, &end_bytes) || end_bytes > p.storage_bytes)
        fail(fmt::format(
            "reads beyond its storage '{}' (storage offset {}, shape {}, stride {}: expected at most {} "
            "bytes, found {})",
            p.storage_key, p.storage_offset, shape_string(p.shape), shape_string(p.stride), p.storage_bytes,
            end_bytes == 0 ? std::string("an overflow") : std::to_string(end_bytes)));
    t.contiguous = numel == 0 || contiguous(p);
    t.offset =
        storage.data_offset + p.storage_offset * item;  // <= data_offset + storage bytes (checked above)
    return t;
}

}  // namespace

std::vector<PytorchTensor> parse_pytorch_archive(std::span<const std::byte> file, const std::string& label) {
    const auto entries = parse_zip_directory(file, label);
    const auto prefix = archive_prefix(entries, label);
    std::map<std::string, const ZipEntry*> by_name;
    for (const auto& e : entries) by_name[e.name] = &e;
    if (by_name.count(prefix + "constants.pkl"))
        throw_input_error(label, "",
                          "a TorchScript archive (torch.jit.save), not a torch.save state dict; load it with "
                          "torch.jit.load and save model.state_dict() with torch.save or safetensors");
    auto stored = [&](const ZipEntry& e, const std::string& tensor) {
        if (e.method != 0)
            throw_input_error(
                label, tensor,
                fmt::format("archive entry '{}' is compressed (method {}); diffract reads tensors in "
                            "place and needs entries STORED as torch.save writes them",
                            e.name, e.method));
    };
    if (const auto it = by_name.find(prefix + "byteorder"); it != by_name.end()) {
        stored(*it->second, "");
        const auto order = entry_text(file, *it->second);
        if (order == "big")
            throw_input_error(
                label, "",
                "a big-endian checkpoint (byteorder 'big'); diffract reads little-endian files only: "
                "re-save it with torch.save on a little-endian machine");
        if (order != "little")
            throw_input_error(label, "", "archive's byteorder record is neither 'little' nor 'big'");
    }
    const auto& pkl = *by_name.at(prefix + "data.pkl");
    stored(pkl, "");
    const auto pickled = parse_torch_pickle(file.subspan(pkl.data_offset, pkl.size), label);
    std::vector<PytorchTensor> out;
    out.reserve(pickled.size());
    for (const auto& p : pickled) {
        const auto it = by_name.find(prefix + "data/" + p.storage_key);
        if (it == by_name.end())
            throw_input_error(
                label, p.name,
                fmt::format("storage '{}data/{}' is missing from the archive", prefix, p.storage_key));
        const auto& e = *it->second;
        stored(e, p.name);
        if (e.size != p.storage_bytes)
            throw_input_error(
                label, p.name,
                fmt::format("storage '{}' size differs from data.pkl's (expected {} bytes, found {})", e.name,
                            p.storage_bytes, e.size));
        out.push_back(locate(p, e, label));
    }
    return out;
}

std::vector<TensorInfo> open_pytorch(const std::string& path) {
    const auto file = MappedFile::open(path);
    const auto located = parse_pytorch_archive(file->bytes(), path);
    std::vector<TensorInfo> out;
    out.reserve(located.size());
    std::uint64_t gathered = 0;
    for (const auto& l : located) {
        TensorInfo t;
        t.name = l.pickled.name;
        t.dtype = l.pickled.dtype;
        t.shape = l.pickled.shape;
        t.nbytes = l.nbytes;
        if (l.contiguous) {
            t.file = file;
            t.offset = l.offset;
        } else {
            // A strided view (saved transposed or sliced): its elements gathered row-major into memory.
            gathered += l.nbytes;
            if (gathered > file->size())
                throw_input_error(
                    path, t.name,
                    fmt::format("strided tensors would take more memory than the file's size ({} "
                                "bytes); save them contiguous (tensor.contiguous())",
                                file->size()));
            const std::size_t item = dtype_size(t.dtype), rank = t.shape.size();
            auto buffer = std::make_shared<std::vector<std::byte>>(l.nbytes);
            std::vector<std::int64_t> index(rank, 0);
            const std::byte* base = file->bytes().data() + l.offset;
            for (std::size_t n = 0; n < l.nbytes / item; ++n) {
                std::uint64_t element = 0;
                for (std::size_t d = 0; d < rank; ++d)
                    element += static_cast<std::uint64_t>(index[d]) *
                               static_cast<std::uint64_t>(l.pickled.stride[d]);
                std::copy_n(base + element * item, item, buffer->data() + n * item);
                for (std::size_t d = rank; d-- > 0;) {
                    if (++index[d] < t.shape[d]) break;
                    index[d] = 0;
                }
            }
            const auto* data = buffer->data();
            t.file = MappedFile::from_memory(path, std::move(buffer), data, l.nbytes);
            t.offset = 0;
        }
        out.push_back(std::move(t));
    }
    return out;
}

}  // namespace diffract::formats
