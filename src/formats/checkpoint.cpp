#include "diffract/formats/checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/formats/gguf.hpp"
#include "diffract/formats/hf_cache.hpp"
#include "diffract/formats/safetensors.hpp"
#include "diffract/formats/shard_index.hpp"

namespace fs = std::filesystem;

namespace diffract::formats {
namespace {

nlohmann::json read_config(const fs::path& dir) {
    const fs::path p = dir / "config.json";
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) return nullptr;
    std::ifstream in(p);
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw_input_error(p.string(), "", fmt::format("config is not valid JSON ({})", e.what()));
    }
}

void append_file(Checkpoint& ck, SafetensorsFile&& f, std::set<std::string>& seen) {
    for (auto& t : f.tensors) {
        if (!seen.insert(t.name).second)
            throw_input_error(f.file->path(), t.name, "tensor appears in more than one file");
        ck.tensors.push_back(std::move(t));
    }
}

void open_sharded(Checkpoint& ck, const fs::path& dir, const fs::path& index_path) {
    const auto index_file = MappedFile::open(index_path.string());
    const auto index = parse_shard_index(index_file->bytes(), index_path.string());
    std::map<std::string, std::set<std::string>> expected;  // shard -> tensors
    for (const auto& [tensor, shard] : index.weight_map) expected[shard].insert(tensor);
    std::set<std::string> seen;
    for (const auto& [shard, names] : expected) {
        const fs::path shard_path = dir / shard;
        std::error_code ec;
        if (!fs::is_regular_file(shard_path, ec))
            throw_input_error(index_path.string(), *names.begin(),
                              fmt::format("weight_map names shard '{}', which does not exist", shard));
        auto f = open_safetensors(shard_path.string());
        std::set<std::string> found;
        for (const auto& t : f.tensors) {
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
        append_file(ck, std::move(f), seen);
    }
}

void open_gguf_file(Checkpoint& ck, const std::string& path) {
    auto g = open_gguf(path);
    ck.format = "gguf";
    ck.tensors = std::move(g.tensors);
    ck.unsupported_types = std::move(g.unsupported_types);
    // Map llama.cpp's metadata onto the HF config keys the schema reads.
    const std::string arch = g.architecture;
    nlohmann::json cfg = nlohmann::json::object();
    cfg["model_type"] = arch.empty() ? "unknown" : arch;
    cfg["architectures"] = nlohmann::json::array({arch.empty() ? "unknown" : arch});
    auto copy_int = [&](const std::string& key, const char* hf_key) {
        auto it = g.metadata.find(arch + "." + key);
        if (it != g.metadata.end() && it->is_number_integer()) cfg[hf_key] = it->get<int>();
    };
    copy_int("attention.head_count", "num_attention_heads");
    copy_int("attention.head_count_kv", "num_key_value_heads");
    copy_int("embedding_length", "hidden_size");
    copy_int("attention.key_length", "head_dim");
    copy_int("block_count", "num_hidden_layers");
    ck.config = std::move(cfg);
}

}  // namespace

std::pair<std::string, std::string> split_model_name(std::string_view spec) {
    const auto eq = spec.find('=');
    if (eq == std::string_view::npos || eq == 0) return {"", std::string(spec)};
    const auto name = spec.substr(0, eq);
    if (name.find('/') != std::string_view::npos) return {"", std::string(spec)};
    return {std::string(name), std::string(spec.substr(eq + 1))};
}

const TensorInfo* Checkpoint::find(std::string_view tensor_name) const {
    for (const auto& t : tensors)
        if (t.name == tensor_name) return &t;
    return nullptr;
}

std::string Checkpoint::directory() const {
    std::error_code ec;
    return fs::is_directory(path, ec) ? path : std::string();
}

Checkpoint open_checkpoint(std::string_view spec) {
    auto [name, location] = split_model_name(spec);
    Checkpoint ck;
    fs::path p = location;
    std::error_code ec;
    if (!fs::exists(p, ec) && looks_like_model_id(location)) p = resolve_hf_cache(location);
    if (!fs::exists(p, ec)) throw_input_error(location, "", "no such file or directory");
    ck.path = p.string();
    fs::path base = p;
    while (base.has_relative_path() && base.filename().empty()) base = base.parent_path();  // "dir/"
    ck.name = !name.empty() ? name : (looks_like_model_id(location) ? location : base.filename().string());

    if (fs::is_directory(p, ec)) {
        ck.format = "safetensors";
        ck.config = read_config(p);
        const fs::path index = p / "model.safetensors.index.json";
        if (fs::is_regular_file(index, ec)) {
            open_sharded(ck, p, index);
        } else {
            std::vector<fs::path> files;
            for (const auto& e : fs::directory_iterator(p))
                if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
            std::sort(files.begin(), files.end());
            if (files.empty()) {
                std::vector<fs::path> ggufs;
                for (const auto& e : fs::directory_iterator(p))
                    if (e.is_regular_file() && e.path().extension() == ".gguf") ggufs.push_back(e.path());
                if (ggufs.size() != 1)
                    throw_input_error(ck.path, "",
                                      "directory holds no .safetensors file (and not exactly one .gguf)");
                open_gguf_file(ck, ggufs.front().string());
            } else {
                std::set<std::string> seen;
                for (const auto& f : files) append_file(ck, open_safetensors(f.string()), seen);
            }
        }
    } else if (p.extension() == ".gguf") {
        open_gguf_file(ck, ck.path);
    } else {
        ck.format = "safetensors";
        ck.config = read_config(p.parent_path().empty() ? fs::path(".") : p.parent_path());
        std::set<std::string> seen;
        append_file(ck, open_safetensors(ck.path), seen);
    }
    ck.schema = model::schema_from_config(
        ck.config, ck.format == "gguf" ? ck.path
                                       : (fs::path(ck.directory().empty() ? fs::path(ck.path).parent_path()
                                                                          : fs::path(ck.path)) /
                                          "config.json")
                                             .string());
    if (ck.format == "gguf")
        ck.schema.conv1d_transposed = false;  // llama.cpp stores every linear as [out, in]
    return ck;
}

}  // namespace diffract::formats
