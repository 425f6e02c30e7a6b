#include "diffract/formats/checkpoint_writer.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "diffract/core/atomic_file.hpp"
#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/core/output_path.hpp"
#include "formats/output_file_impl.hpp"

namespace fs = std::filesystem;

namespace diffract::formats {
namespace {

std::string safetensors_header(const std::vector<const TensorSpec*>& specs,
                               const std::map<std::string, std::string>& metadata) {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata.empty()) h["__metadata__"] = metadata;
    std::uint64_t offset = 0;
    for (const auto* s : specs) {
        h[s->name] = {{"dtype", dtype_name(s->dtype)},
                      {"shape", s->shape},
                      {"data_offsets", {offset, offset + s->nbytes()}}};
        offset += s->nbytes();
    }
    std::string text = h.dump();
    while (text.size() % 8 != 0) text.push_back(' ');  // keep the data section 8-byte aligned
    return text;
}

void write_shard(const std::string& path, const std::vector<const TensorSpec*>& specs,
                 const TensorProducer& produce, const std::map<std::string, std::string>& metadata) {
    OutputFile f(path);
    const std::string header = safetensors_header(specs, metadata);
    std::uint8_t len[8];
    for (int i = 0; i < 8; ++i)
        len[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
    f.write(len, 8);
    f.write(header.data(), header.size());
    std::vector<std::byte> buffer;
    for (const auto* s : specs) {
        throw_if_cancelled();
        buffer.resize(s->nbytes());
        produce(*s, buffer);
        f.write(buffer.data(), buffer.size());
    }
    f.finish();
}

// Copies every file of `from` (recursively) into `to` except weight files, hidden entries and the
// files the writer itself produces; returns the weight files left out (relative paths, sorted).
std::vector<std::string> carry_files(const fs::path& from, const fs::path& to, const WriteOptions& options) {
    std::vector<std::string> left_out;
    std::error_code ec;
    auto it = fs::recursive_directory_iterator(from, fs::directory_options::follow_directory_symlink, ec);
    if (ec) throw_input_error(from.string(), "", "cannot list the model directory: " + ec.message());
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) throw_input_error(from.string(), "", "cannot list the model directory: " + ec.message());
        const fs::path rel = fs::relative(it->path(), from);
        const auto rel_text = rel.generic_string();
        if (rel.filename().string().starts_with(".")) {
            if (it->is_directory(ec)) it.disable_recursion_pending();
            continue;
        }
        if (it->is_directory(ec)) {
            fs::create_directories(to / rel, ec);
            if (ec) throw_input_error((to / rel).string(), "", "cannot create: " + ec.message());
            continue;
        }
        if (!it->is_regular_file(ec)) continue;  // sockets, FIFOs, dangling links: nothing to carry
        if (is_weight_file(rel_text)) {
            const auto& replaced = options.replaced_weight_files;
            if (std::find(replaced.begin(), replaced.end(), rel_text) == replaced.end())
                left_out.push_back(rel_text);
            continue;
        }
        const bool rewritten = (rel_text == "config.json" && !options.config.is_null()) ||
                               options.extra_files.count(rel_text) ||
                               (rel_text == kProvenanceFile && !options.provenance.is_null());
        if (rewritten) continue;
        if (!fs::copy_file(it->path(), to / rel, ec))
            throw_input_error(it->path().string(), "", "cannot copy into the output: " + ec.message());
    }
    std::sort(left_out.begin(), left_out.end());
    return left_out;
}

}  // namespace

std::uint64_t TensorSpec::nbytes() const {
    std::uint64_t n = dtype_size(dtype);
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
}

bool is_weight_file(const std::string& relative_path) {
    const fs::path p(relative_path);
    const auto name = p.filename().string();
    if (name.ends_with(".index.json"))
        return true;  // model.safetensors.index.json, pytorch_model.bin.index.json
    static const char* kWeightExtensions[] = {".safetensors", ".bin",       ".pt", ".pth",
                                              ".ckpt",        ".gguf",      ".h5", ".msgpack",
                                              ".onnx",        ".onnx_data", ".ot"};
    const auto ext = p.extension().string();
    for (const char* e : kWeightExtensions)
        if (ext == e) return true;
    return false;
}

void write_directory_atomically(const std::string& out_dir, const std::vector<std::string>& inputs,
                                const std::function<void(const std::string&)>& fill) {
    check_output_path(out_dir, inputs);
    diffract::write_directory_atomically(out_dir, fill, ExistingOutput::refuse);
}

void write_model_directory(const std::string& out_dir, const WriteOptions& options,
                           const std::function<void(const std::string& tmp_dir)>& write_weights) {
    write_directory_atomically(out_dir, options.inputs, [&](const std::string& tmp) {
        std::vector<std::string> not_carried;
        if (!options.copy_files_from.empty())
            not_carried = carry_files(options.copy_files_from, tmp, options);
        if (!options.config.is_null()) {
            write_file_fully((fs::path(tmp) / "config.json").string(), json_text(options.config, 2) + "\n");
        }
        for (const auto& [name, contents] : options.extra_files)
            write_file_fully((fs::path(tmp) / name).string(), contents);
        write_weights(tmp);
        if (!options.provenance.is_null()) {  // last: it records what the weights turned out to be
            auto provenance = options.provenance;
            provenance["not_carried"] = not_carried;
            if (options.complete_provenance) options.complete_provenance(provenance);
            write_file_fully((fs::path(tmp) / kProvenanceFile).string(), json_text(provenance, 2) + "\n");
        }
    });
}

void write_checkpoint(const std::string& out_dir, const std::vector<TensorSpec>& tensors,
                      const TensorProducer& produce, const WriteOptions& options) {
    // Plan shards: consecutive tensors until the size cap (a tensor larger than the cap gets its own).
    std::vector<std::vector<const TensorSpec*>> shards(1);
    std::uint64_t current = 0;
    for (const auto& t : tensors) {
        if (!shards.back().empty() && current + t.nbytes() > options.max_shard_bytes) {
            shards.emplace_back();
            current = 0;
        }
        shards.back().push_back(&t);
        current += t.nbytes();
    }
    write_model_directory(out_dir, options, [&](const std::string& tmp) {
        if (shards.size() == 1) {
            write_shard((fs::path(tmp) / options.weights_file).string(), shards[0], produce,
                        options.metadata);
            return;
        }
        nlohmann::ordered_json index;
        std::uint64_t total = 0;
        nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
        for (std::size_t i = 0; i < shards.size(); ++i) {
            const auto file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
            write_shard((fs::path(tmp) / file).string(), shards[i], produce, options.metadata);
            for (const auto* s : shards[i]) {
                weight_map[s->name] = file;
                total += s->nbytes();
            }
        }
        index["metadata"] = {{"total_size", total}};
        index["weight_map"] = weight_map;
        write_file_fully((fs::path(tmp) / "model.safetensors.index.json").string(),
                         json_text(index, 2) + "\n");
    });
}

}  // namespace diffract::formats
