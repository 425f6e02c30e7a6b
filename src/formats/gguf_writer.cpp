#include "diffract/formats/gguf_writer.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/matrix.hpp"
#include "formats/gguf_types_impl.hpp"
#include "formats/output_file_impl.hpp"

namespace diffract::formats {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" as a little-endian u32

template <typename T>
void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::uint64_t padding(std::uint64_t offset, std::uint32_t alignment) {
    return (alignment - offset % alignment) % alignment;
}

struct Planned {
    std::uint32_t type = 0;
    std::uint64_t nbytes = 0, offset = 0;  // offset relative to the data section
};

}  // namespace

std::optional<std::uint32_t> gguf_type_id(DType dtype) {
    if (dtype_is_block(dtype)) return std::nullopt;
    for (const auto& g : gguf_detail::kGgmlTypes)
        if (g.dtype == dtype) return g.id;
    return std::nullopt;
}

void write_gguf(const std::string& path, const GgufFile& source,
                const std::vector<std::optional<DType>>& rewritten, const TensorProducer& produce) {
    if (!source.file || rewritten.size() != source.tensors.size() ||
        source.ggml_types.size() != source.tensors.size())
        throw std::logic_error("write_gguf: the plan does not match the source file");
    std::vector<Planned> plan(source.tensors.size());
    std::uint64_t data = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
        const auto& t = source.tensors[i];
        if (rewritten[i]) {
            const auto id = gguf_type_id(*rewritten[i]);
            if (!id)
                throw_input_error(path, t.name,
                                  fmt::format("GGUF cannot store the dtype {}", dtype_name(*rewritten[i])));
            plan[i].type = *id;
            plan[i].nbytes = static_cast<std::uint64_t>(t.numel()) * dtype_size(*rewritten[i]);
        } else {
            plan[i].type = source.ggml_types[i];
            plan[i].nbytes = t.nbytes;
        }
        data += padding(data, source.alignment);
        plan[i].offset = data;
        data += plan[i].nbytes;
    }

    // Header, the metadata as stored, then the tensor infos (ggml order: ne[0] innermost).
    std::string head;
    put(head, kMagic);
    put(head, source.version);
    put(head, static_cast<std::uint64_t>(source.tensors.size()));
    put(head, static_cast<std::uint64_t>(source.metadata.size()));
    const auto stored = source.file->bytes();
    head.append(reinterpret_cast<const char*>(stored.data()) + kGgufHeaderBytes,
                static_cast<std::size_t>(source.kv_end - kGgufHeaderBytes));
    for (std::size_t i = 0; i < plan.size(); ++i) {
        const auto& t = source.tensors[i];
        put(head, static_cast<std::uint64_t>(t.name.size()));
        head += t.name;
        put(head, static_cast<std::uint32_t>(t.shape.size()));
        for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put(head, static_cast<std::uint64_t>(*d));
        put(head, plan[i].type);
        put(head, plan[i].offset);
    }
    head.append(padding(head.size(), source.alignment), '\0');

    OutputFile out(path);
    out.write(head.data(), head.size());
    std::vector<std::byte> values, layout;
    for (std::size_t i = 0; i < plan.size(); ++i) {
        throw_if_cancelled();
        const auto& t = source.tensors[i];
        out.write_zeros(static_cast<std::size_t>(head.size() + plan[i].offset - out.position()));
        values.resize(static_cast<std::size_t>(plan[i].nbytes));
        produce(TensorSpec{t.name, rewritten[i].value_or(t.dtype), t.shape}, values);
        if (!rewritten[i] || t.rope_head_rows == 0 || values.empty()) {
            out.write(values.data(), values.size());
            continue;
        }
        // Logical row r goes back to the stored row the source holds it in.
        const auto rows = stored_rows(t);
        const std::size_t row = values.size() / static_cast<std::size_t>(rows);
        layout.resize(values.size());
        for (std::int64_t r = 0; r < rows; ++r)
            std::memcpy(layout.data() + static_cast<std::size_t>(t.stored_row(r)) * row,
                        values.data() + static_cast<std::size_t>(r) * row, row);
        out.write(layout.data(), layout.size());
    }
    out.finish();
}

}  // namespace diffract::formats
