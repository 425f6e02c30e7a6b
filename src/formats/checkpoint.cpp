#include "diffract/formats/checkpoint.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "diffract/core/busy_threads.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/mapped_file.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/core/spelling.hpp"
#include "diffract/formats/file_kind.hpp"
#include "diffract/formats/gguf.hpp"
#include "diffract/formats/hf_cache.hpp"
#include "diffract/formats/lora_adapter.hpp"
#include "diffract/formats/packed_experts.hpp"
#include "diffract/formats/pytorch.hpp"
#include "diffract/formats/quantized_safetensors.hpp"
#include "diffract/formats/safetensors.hpp"
#include "diffract/formats/shard_index.hpp"

namespace fs = std::filesystem;

namespace diffract::formats {
namespace {

// What a path is, for messages about inputs that are not regular files or directories (file_type_name;
// a path whose status cannot be read, a dangling link among them, is "not a regular file").
std::string_view file_kind(fs::file_type t) {
    const bool unreadable = t == fs::file_type::none || t == fs::file_type::not_found ||
                            t == fs::file_type::unknown || t == fs::file_type::symlink;
    return unreadable ? "not a regular file" : file_type_name(t);
}

// Inputs are regular files or directories (symbolic links followed); anything else (a FIFO would
// block the read) is refused before it is opened.
void require_file_or_directory(const fs::path& p, bool directory_allowed) {
    std::error_code ec;
    const auto st = fs::status(p, ec);
    if (st.type() == fs::file_type::regular || (directory_allowed && st.type() == fs::file_type::directory))
        return;
    throw_input_error(p.string(), "",
                      fmt::format("not a regular file{} (found {})", directory_allowed ? " or directory" : "",
                                  file_kind(st.type())));
}

nlohmann::json read_config(const fs::path& dir) {
    const fs::path p = dir / "config.json";
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(p, ec))) return nullptr;
    if (!fs::exists(p, ec)) throw_input_error(p.string(), "", "config.json is a dangling symbolic link");
    require_file_or_directory(p, false);
    const auto file = MappedFile::open(p.string());
    return parse_config_json(file->bytes(), p.string());
}

// The tensors of one weight file, by what its bytes are (the extension decides only for bytes that
// look like no format, so that a damaged .safetensors or .gguf file gets its own parser's message).
// Formats diffract does not read are refused here, with what the file is and what to do.
std::vector<TensorInfo> open_weight_file(const fs::path& p, CheckpointFormat& format) {
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    std::array<std::byte, 64> buffer{};
    std::ifstream in(p, std::ios::binary);
    if (!in) MappedFile::open(p.string());  // throws the InputError that names the path and strerror
    in.read(reinterpret_cast<char*>(buffer.data()), buffer.size());
    const std::span<const std::byte> head(
        buffer.data(), static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    const auto kind = detect_file_kind(head, ec ? head.size() : size);
    const auto ext = p.extension();
    if (kind == FileKind::zip) {
        format = CheckpointFormat::pytorch;
        return open_pytorch(p.string());
    }
    if (kind == FileKind::safetensors || (kind == FileKind::unknown && ext == ".safetensors")) {
        format = CheckpointFormat::safetensors;
        return open_safetensors(p.string()).tensors;
    }
    if (kind == FileKind::gguf || (kind == FileKind::unknown && ext == ".gguf")) {
        format = CheckpointFormat::gguf;
        return {};
    }
    throw_input_error(p.string(), "", unsupported_kind_message(kind, head));
}

void append_file(Checkpoint& ck, std::vector<TensorInfo>&& tensors, std::set<std::string>& seen) {
    for (auto& t : tensors) {
        if (!seen.insert(t.name).second)
            throw_input_error(t.path(), t.name, "tensor appears in more than one file");
        ck.tensors.push_back(std::move(t));
    }
}

// A non-GGUF weight file appended to `ck`, whose format it must share with the files before it.
void append_weight_file(Checkpoint& ck, const fs::path& p, std::set<std::string>& seen) {
    CheckpointFormat format = CheckpointFormat::unknown;
    auto tensors = open_weight_file(p, format);
    if (format == CheckpointFormat::gguf)
        throw_input_error(p.string(), "", "a GGUF file cannot be one of several weight files");
    if (ck.format != CheckpointFormat::unknown && ck.format != format)
        throw_input_error(p.string(), "",
                          fmt::format("weight files mix formats (expected {}, found {})",
                                      format_name(ck.format), format_name(format)));
    ck.format = format;
    append_file(ck, std::move(tensors), seen);
}

// Shards listed by an index (model.safetensors.index.json, pytorch_model.bin.index.json): every
// shard holds exactly the tensors the index maps to it.
void open_sharded(Checkpoint& ck, const fs::path& dir, const fs::path& index_path) {
    const auto index_file = MappedFile::open(index_path.string());
    const auto index = parse_shard_index(index_file->bytes(), index_path.string());
    std::map<std::string, std::set<std::string>> expected;  // shard -> tensors
    for (const auto& [tensor, shard] : index.weight_map) expected[shard].insert(tensor);
    std::set<std::string> seen;
    for (const auto& [shard, names] : expected) {
        const fs::path shard_path = dir / shard;
        std::error_code ec;
        if (!fs::exists(shard_path, ec))
            throw_input_error(index_path.string(), *names.begin(),
                              fmt::format("weight_map names shard '{}', which does not exist", shard));
        require_file_or_directory(shard_path, false);
        CheckpointFormat format = CheckpointFormat::unknown;
        auto tensors = open_weight_file(shard_path, format);
        if (format == CheckpointFormat::gguf)
            throw_input_error(shard_path.string(), "", "a GGUF file cannot be a shard");
        if (ck.format != CheckpointFormat::unknown && ck.format != format)
            throw_input_error(shard_path.string(), "",
                              fmt::format("shards mix formats (expected {}, found {})",
                                          format_name(ck.format), format_name(format)));
        ck.format = format;
        std::set<std::string> found;
        for (const auto& t : tensors) {
            found.insert(t.name);
            if (!names.count(t.name))
                throw_input_error(shard_path.string(), t.name,
                                  fmt::format("tensor is in this shard but the index maps it elsewhere ({})",
                                              index.weight_map.count(t.name) ? index.weight_map.at(t.name)
                                                                             : "absent from weight_map"));
        }
        for (const auto& n : names)
            if (!found.count(n))
                throw_input_error(shard_path.string(), n,
                                  "index maps the tensor to this shard but the shard does not hold it");
        append_file(ck, std::move(tensors), seen);
    }
}

void open_gguf_file(Checkpoint& ck, const std::string& path) {
    auto g = open_gguf(path);
    ck.format = CheckpointFormat::gguf;
    ck.tensors = std::move(g.tensors);
    ck.unsupported_types = std::move(g.unsupported_types);
    // llama.cpp's metadata mapped onto the HF config keys the schema reads.
    ck.config = gguf_config(g, path);
}

}  // namespace

std::pair<std::string, std::string> split_model_name(std::string_view spec) {
    const auto eq = spec.find('=');
    if (eq == std::string_view::npos || eq == 0) return {"", std::string(spec)};
    const auto name = spec.substr(0, eq);
    if (name.find('/') != std::string_view::npos) return {"", std::string(spec)};
    return {std::string(name), std::string(spec.substr(eq + 1))};
}

std::string_view format_name(CheckpointFormat format) {
    switch (format) {
        case CheckpointFormat::safetensors:
            return "safetensors";
        case CheckpointFormat::pytorch:
            return "pytorch";
        case CheckpointFormat::gguf:
            return "gguf";
        case CheckpointFormat::unknown:
            break;
    }
    return "unknown";
}

const TensorInfo* Checkpoint::find(std::string_view tensor_name) const {
    for (const auto& t : tensors)
        if (t.name == tensor_name) return &t;
    return nullptr;
}

std::vector<std::string> Checkpoint::input_paths() const {
    std::vector<std::string> out{path};
    if (!adapter.empty()) out.push_back(adapter);
    return out;
}

std::vector<std::string> input_paths(const std::vector<const Checkpoint*>& models) {
    std::vector<std::string> out;
    for (const auto* ck : models)
        for (auto& p : ck->input_paths()) out.push_back(std::move(p));
    return out;
}

std::string Checkpoint::directory() const {
    std::error_code ec;
    return fs::is_directory(path, ec) ? path : std::string();
}

namespace {

// "no such file or directory", with the closest entry of its directory when one is a likely typo.
std::string no_such_path(const fs::path& p) {
    std::vector<std::string> siblings;
    std::error_code ec;
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    std::size_t seen = 0;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end && seen < 10000; it.increment(ec), ++seen)
        siblings.push_back(it->path().filename().string());
    const auto best = closest_spelling(p.filename().string(), siblings);
    if (best.empty()) return "no such file or directory";
    return fmt::format("no such file or directory (did you mean '{}'?)", (p.parent_path() / best).string());
}

// The path `location` names: itself, or a model id's snapshot in the Hugging Face cache. Throws
// InputError for a path that does not exist or is neither a file nor a directory.
fs::path resolve_location(const std::string& location) {
    fs::path p = location;
    std::error_code ec;
    if (!fs::exists(p, ec) && looks_like_model_id(location)) p = resolve_hf_cache(location);
    if (!fs::exists(p, ec)) throw_input_error(location, "", no_such_path(p));
    require_file_or_directory(p, true);
    return p;
}

// The model's name: the one given (NAME=PATH), else a model id as written, else the last component of
// its path ("dir/" names "dir").
std::string model_name(const std::string& given, const std::string& location, const fs::path& p) {
    if (!given.empty()) return given;
    if (looks_like_model_id(location)) return location;
    fs::path base = p;
    while (base.has_relative_path() && base.filename().empty()) base = base.parent_path();
    return base.filename().string();
}

// A directory's config and weights: safetensors first (sharded, then every .safetensors file), then
// PyTorch (sharded, then pytorch_model.bin), then a lone .gguf.
void open_directory(Checkpoint& ck, const fs::path& p) {
    std::error_code ec;
    ck.config = read_config(p);
    const fs::path st_index = p / "model.safetensors.index.json",
                   pt_index = p / "pytorch_model.bin.index.json", pt_file = p / "pytorch_model.bin";
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(p)) {
        if (e.path().extension() != ".safetensors") continue;
        require_file_or_directory(e.path(), false);
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (fs::exists(st_index, ec)) {
        require_file_or_directory(st_index, false);
        open_sharded(ck, p, st_index);
    } else if (!files.empty()) {
        std::set<std::string> seen;
        for (const auto& f : files) append_weight_file(ck, f, seen);
    } else if (fs::exists(pt_index, ec)) {
        require_file_or_directory(pt_index, false);
        open_sharded(ck, p, pt_index);
    } else if (fs::exists(pt_file, ec)) {
        require_file_or_directory(pt_file, false);
        std::set<std::string> seen;
        append_weight_file(ck, pt_file, seen);
    } else {
        std::vector<fs::path> ggufs;
        for (const auto& e : fs::directory_iterator(p))
            if (e.path().extension() == ".gguf") ggufs.push_back(e.path());
        for (const auto& f : ggufs) require_file_or_directory(f, false);
        if (ggufs.size() != 1)
            throw_input_error(
                ck.path, "",
                "directory holds no .safetensors file, no pytorch_model.bin (and not exactly one .gguf)");
        open_gguf_file(ck, ggufs.front().string());
    }
}

// One weight file given alone: its format from its bytes, its config the config.json beside it (a
// GGUF's from its own metadata).
void open_single_file(Checkpoint& ck, const fs::path& p) {
    CheckpointFormat format = CheckpointFormat::unknown;
    auto tensors = open_weight_file(p, format);
    if (format == CheckpointFormat::gguf) {
        open_gguf_file(ck, ck.path);
        return;
    }
    ck.format = format;
    ck.config = read_config(p.parent_path().empty() ? fs::path(".") : p.parent_path());
    std::set<std::string> seen;
    append_file(ck, std::move(tensors), seen);
}

// Where the config came from, as messages name it: the GGUF file itself, else the config.json read.
std::string config_label(const Checkpoint& ck) {
    if (ck.format == CheckpointFormat::gguf) return ck.path;
    const fs::path dir = ck.directory().empty() ? fs::path(ck.path).parent_path() : fs::path(ck.path);
    return (dir / "config.json").string();
}

// The schema the config describes, checked against the tensors' head geometry.
void read_schema(Checkpoint& ck, const std::string& label) {
    ck.schema = model::schema_from_config(ck.config, label);
    if (ck.format == CheckpointFormat::gguf) {
        // llama.cpp stores every linear as [out, in], and its converters write fused qkv as [q; k; v].
        ck.schema.conv1d_transposed = false;
        if (ck.schema.qkv_layout != model::QkvLayout::separate)
            ck.schema.qkv_layout = model::QkvLayout::concatenated;
    }
    model::check_head_geometry(ck.schema, ck.tensors);
}

// The layer count, when the config gives one, bounds the language model's layer indices (a lone shard
// may hold fewer layers, never more); a tower's layers are its own.
void check_layer_count(const Checkpoint& ck) {
    if (!ck.schema.num_layers) return;
    for (const auto& t : ck.tensors)
        if (const auto r = model::classify_tensor(t.name);
            r.component == model::Component::language && r.layer && *r.layer >= *ck.schema.num_layers)
            throw_input_error(
                t.path(), t.name,
                fmt::format("layer index beyond the configured layer count ({}: expected "
                            "below {}, found {})",
                            ck.format == CheckpointFormat::gguf ? "block_count" : "num_hidden_layers",
                            *ck.schema.num_layers, r.layer.value()));
}

}  // namespace

// The stages: the model's name and location (a LoRA adapter opens its base and merges), the path,
// the weights of a directory or of one file, then the quantized weights decoded, packed experts split,
// the schema and the layer count checked.
Checkpoint open_checkpoint(std::string_view spec) {
    const BusyScope reading_headers;
    auto [name, location] = split_model_name(spec);
    if (location.empty())
        throw InputError(
            fmt::format("an empty model path{}", spec.empty() ? "" : fmt::format(" in '{}'", spec)));
    // LoRA: BASE+ADAPTER, or an adapter directory alone (its config names the base).
    if (is_lora_adapter(location)) return open_lora_model(name, "", location);
    std::error_code ec;
    if (!fs::exists(fs::path(location), ec))
        if (auto [base_spec, adapter_dir] = split_lora_spec(location); !adapter_dir.empty())
            return open_lora_model(name, base_spec, adapter_dir);
    const fs::path p = resolve_location(location);
    Checkpoint ck;
    ck.path = p.string();
    ck.name = model_name(name, location, p);
    if (fs::is_directory(p, ec))
        open_directory(ck, p);
    else
        open_single_file(ck, p);
    const std::string label = config_label(ck);
    read_quantized_weights(ck, label);
    split_packed_experts(ck);
    read_schema(ck, label);
    check_layer_count(ck);
    return ck;
}

}  // namespace diffract::formats
