#include "diffract/formats/checkpoint_writer.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "diffract/core/atomic_file.hpp"
#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/output_path.hpp"

namespace fs = std::filesystem;

namespace diffract::formats {
namespace {

struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};

void write_all(std::FILE* f, const void* data, std::size_t n, const std::string& path) {
    if (n > 0 && std::fwrite(data, 1, n, f) != n) throw_input_error(path, "", "write failed (disk full?)");
}

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
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
    if (!f) throw_input_error(path, "", "cannot create file");
    const std::string header = safetensors_header(specs, metadata);
    std::uint8_t len[8];
    for (int i = 0; i < 8; ++i)
        len[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
    write_all(f.get(), len, 8, path);
    write_all(f.get(), header.data(), header.size(), path);
    std::vector<std::byte> buffer;
    for (const auto* s : specs) {
        throw_if_cancelled();
        buffer.resize(s->nbytes());
        produce(*s, buffer);
        write_all(f.get(), buffer.data(), buffer.size(), path);
    }
    if (std::fflush(f.get()) != 0 || fsync(fileno(f.get())) != 0 || std::fclose(f.release()) != 0)
        throw_input_error(path, "", "write failed (disk full?)");
}

}  // namespace

std::uint64_t TensorSpec::nbytes() const {
    std::uint64_t n = dtype_size(dtype);
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
}

bool is_companion_file(const std::string& f) {
    if (f == "config.json" || f == "generation_config.json" || f == "special_tokens_map.json" ||
        f == "vocab.json" || f == "merges.txt" || f == "added_tokens.json" || f == "vocab.txt" ||
        f == "chat_template.jinja")
        return true;
    return f.starts_with("tokenizer") || f.ends_with(".model") || f.ends_with(".tiktoken");
}

void write_directory_atomically(const std::string& out_dir, const std::vector<std::string>& inputs,
                                const std::function<void(const std::string&)>& fill) {
    check_output_path(out_dir, inputs);
    diffract::write_directory_atomically(out_dir, fill, ExistingOutput::refuse);
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
    write_directory_atomically(out_dir, options.inputs, [&](const std::string& tmp) {
        if (!options.copy_files_from.empty()) {
            for (const auto& e : fs::directory_iterator(options.copy_files_from)) {
                const auto name = e.path().filename().string();
                std::error_code ec;
                if (e.is_regular_file() && is_companion_file(name) &&
                    !fs::copy_file(e.path(), fs::path(tmp) / name, ec))
                    throw_input_error(e.path().string(), "", "cannot copy into the output: " + ec.message());
            }
        }
        if (!options.config.is_null()) {
            write_file_fully((fs::path(tmp) / "config.json").string(), options.config.dump(2) + "\n");
        }
        for (const auto& [name, contents] : options.extra_files)
            write_file_fully((fs::path(tmp) / name).string(), contents);
        if (shards.size() == 1) {
            write_shard((fs::path(tmp) / "model.safetensors").string(), shards[0], produce, options.metadata);
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
        write_file_fully((fs::path(tmp) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
    });
}

}  // namespace diffract::formats
