// The fuzz targets' bodies, shared by the libFuzzer harnesses (tests/fuzz/*_fuzz.cpp) and the unit
// test that replays every corpus file (tests/unit/fuzz_corpus_test.cpp).
//
// Each target feeds arbitrary bytes to one parser entry point. The parser may only return or throw
// InputError (caught here); after a successful parse the invariants it promises are checked, and a
// violation throws Finding. Anything that escapes a target (Finding, another exception, a crash, a
// sanitizer report) is a bug.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "diffract/core/block_quant.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/quantized.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/formats/gguf.hpp"
#include "diffract/formats/lora_adapter.hpp"
#include "diffract/formats/pytorch.hpp"
#include "diffract/formats/quantized_safetensors.hpp"
#include "diffract/formats/safetensors.hpp"
#include "diffract/formats/shard_index.hpp"
#include "diffract/model/schema.hpp"
#include "diffract/sweep/sweep.hpp"
#include "diffract/watch/run_directory.hpp"

namespace diffract::fuzz {

using Bytes = std::span<const std::byte>;

// A broken invariant: never an InputError, so that nothing catches it on the way out.
struct Finding : std::logic_error {
    using std::logic_error::logic_error;
};

inline void expect(bool ok, const std::string& what) {
    if (!ok) throw Finding(what);
}

// Every head block of `t` lies inside the tensor as stored; throws InputError when the geometry
// does not fit the shape (that is the parser's answer, not a finding).
inline void check_head_blocks(const model::ModelSchema& schema, const TensorInfo& t) {
    if (t.shape.size() != 2) return;
    const auto role = model::classify_tensor(t.name).role;
    for (const auto& hb : model::head_blocks(schema, t, role)) {
        const auto& b = hb.block;
        expect(b.row0 >= 0 && b.col0 >= 0 && b.rows > 0 && b.cols > 0, "empty or negative head block");
        expect(b.row0 + b.rows <= t.shape[0] && b.col0 + b.cols <= t.shape[1],
               fmt::format("head block of {} outside the tensor", t.name));
    }
}

// The schema's geometry checked against projections shaped as the geometry says (every head block
// inside, the expected number of heads), and against one the fuzzer's bytes shape.
inline void check_schema(const model::ModelSchema& s, std::int64_t extra_rows, std::int64_t extra_cols) {
    if (!s.heads) return;
    const auto& g = *s.heads;
    expect(g.n_heads > 0 && g.n_kv_heads > 0 && g.head_dim > 0 && g.n_heads % g.n_kv_heads == 0,
           "accepted geometry is not positive and divisible");
    if (g.n_heads > 4096) return;  // valid, but too many blocks to list at fuzzing speed
    const std::int64_t d = g.head_dim, hidden = g.hidden > 0 ? g.hidden : 64;
    auto tensor = [&](const char* name, std::int64_t rows, std::int64_t cols) {
        TensorInfo t;
        t.name = name;
        t.shape = s.conv1d_transposed ? std::vector<std::int64_t>{cols, rows}
                                      : std::vector<std::int64_t>{rows, cols};
        return t;
    };
    if (s.qkv_layout == model::QkvLayout::separate) {
        const auto q = tensor("model.layers.0.self_attn.q_proj.weight", g.n_heads * d, hidden);
        expect(model::head_blocks(s, q, model::Role::attn_q).size() == static_cast<std::size_t>(g.n_heads),
               "query heads");
        const auto k = tensor("model.layers.0.self_attn.k_proj.weight", g.n_kv_heads * d, hidden);
        expect(model::head_blocks(s, k, model::Role::attn_k).size() == static_cast<std::size_t>(g.n_kv_heads),
               "key heads");
        check_head_blocks(s, q);
        check_head_blocks(s, tensor("model.layers.0.self_attn.o_proj.weight", hidden, g.n_heads * d));
    }
    try {
        check_head_blocks(s, tensor("model.layers.0.self_attn.q_proj.weight", extra_rows, extra_cols));
    } catch (const InputError&) {
    }
}

// safetensors: the header JSON and offsets. Every tensor lies inside the input.
inline void safetensors_header(Bytes bytes) {
    try {
        const auto h = formats::parse_safetensors(bytes, "fuzz.safetensors");
        std::set<std::string> names;
        for (const auto& t : h.tensors) {
            expect(h.data_start() + t.end <= bytes.size() && t.begin <= t.end, "tensor outside the file");
            expect(names.insert(t.name).second, "duplicate tensor name accepted");
        }
    } catch (const InputError&) {
    }
}

// model.safetensors.index.json: accepted file names never leave the model directory.
inline void shard_index(Bytes bytes) {
    try {
        const auto idx = formats::parse_shard_index(bytes, "fuzz.index.json");
        expect(!idx.weight_map.empty(), "empty weight_map accepted");
        for (const auto& [tensor, file] : idx.weight_map)
            expect(!file.empty() && file.find('/') == std::string::npos && file != "..",
                   "shard outside the directory");
    } catch (const InputError&) {
    }
}

// GGUF: header, metadata, tensor infos; then the geometry the metadata gives, against the tensors.
inline void gguf(Bytes bytes) {
    try {
        const auto f = formats::parse_gguf_bytes(bytes, "fuzz.gguf");
        (void)f.metadata.dump();  // strings were made valid UTF-8
        volatile unsigned sink = 0;
        for (const auto& t : f.tensors) {
            expect(t.offset <= bytes.size() && t.nbytes <= bytes.size() - t.offset,
                   "tensor outside the file");
            if (t.nbytes > 0) sink = sink + static_cast<unsigned>(bytes[t.offset + t.nbytes - 1]);
            if (t.rope_head_rows > 0)  // a RoPE row order permutes rows within whole heads
                expect(t.rope_head_rows % 2 == 0 && t.shape[0] % t.rope_head_rows == 0, "RoPE row order");
            if (dtype_is_block(t.dtype)) {
                const auto n = static_cast<std::size_t>(t.numel());
                expect(dtype_bytes(t.dtype, n) == t.nbytes, "block-quantised size");
                if (n <= 4096) {
                    std::vector<float> out(n);
                    dequantize_blocks(bytes.data() + t.offset, t.dtype, n, out.data());
                }
            }
        }
        const auto schema = model::schema_from_config(formats::gguf_config(f, "fuzz.gguf"), "fuzz.gguf");
        check_schema(schema, 0, 0);
        for (const auto& t : f.tensors) check_head_blocks(schema, t);
    } catch (const InputError&) {
    }
}

// config.json: the JSON, the family and every geometry key; the same object read as GGUF metadata
// (keys such as "llama.attention.head_count", architecture from "general.architecture").
inline void config_geometry(Bytes bytes) {
    const auto rows = static_cast<std::int64_t>(bytes.size() % 97),
               cols = static_cast<std::int64_t>(bytes.size() % 89);
    nlohmann::json config;
    try {
        config = formats::parse_config_json(bytes, "fuzz/config.json");
        expect(config.is_object(), "a config that is not an object accepted");
        check_schema(model::schema_from_config(config, "fuzz/config.json"), rows, cols);
    } catch (const InputError&) {
    }
    if (!config.is_object()) return;
    try {
        formats::GgufFile g;
        g.metadata = config;
        if (auto a = config.find("general.architecture"); a != config.end() && a->is_string())
            g.architecture = a->get<std::string>();
        check_schema(model::schema_from_config(formats::gguf_config(g, "fuzz.gguf"), "fuzz.gguf"), rows,
                     cols);
    } catch (const InputError&) {
    }
}

// rewind --heads FILE: every accepted row is a distinct non-negative (layer, head) with its line.
inline void heads_csv(Bytes bytes) {
    try {
        const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        const auto heads = edit::parse_heads_csv(text, "fuzz.csv");
        expect(!heads.empty(), "no heads accepted");
        std::set<std::pair<int, int>> seen;
        int last_line = 0;
        for (const auto& h : heads) {
            expect(h.layer >= 0 && h.head >= 0, "negative head accepted");
            expect(seen.insert({h.layer, h.head}).second, "duplicate head accepted");
            expect(h.line > last_line, "lines out of order");
            last_line = h.line;
        }
    } catch (const InputError&) {
    }
}

// zip directory, then the same bytes as a torch.save archive: accepted entries lie inside the input,
// disjoint and uniquely named; every accepted tensor reads only bytes of its storage entry.
inline void zip_directory(Bytes bytes) {
    try {
        const auto entries = formats::parse_zip_directory(bytes, "fuzz.zip");
        std::set<std::string> names;
        for (const auto& e : entries) {
            expect(e.data_offset <= bytes.size() && e.compressed_size <= bytes.size() - e.data_offset,
                   "zip entry outside the file");
            expect(e.local_header_offset < e.data_offset, "zip data before its local header");
            expect(names.insert(e.name).second, "duplicate zip entry accepted");
            expect(e.method != 0 || e.size == e.compressed_size, "stored entry with two sizes");
        }
    } catch (const InputError&) {
        return;
    }
    try {
        for (const auto& t : formats::parse_pytorch_archive(bytes, "fuzz.bin")) {
            expect(t.nbytes <= t.pickled.storage_bytes, "tensor larger than its storage");
            expect(
                t.storage_begin <= bytes.size() && t.pickled.storage_bytes <= bytes.size() - t.storage_begin,
                "storage outside the file");
            if (t.contiguous)
                expect(t.offset >= t.storage_begin &&
                           t.offset - t.storage_begin + t.nbytes <= t.pickled.storage_bytes,
                       "contiguous tensor outside its storage");
        }
    } catch (const InputError&) {
    }
}

// data.pkl through the restricted unpickler: accepted tensors have unique non-empty names and as
// many strides as dimensions; whatever the bytes, nothing but InputError escapes.
inline void pickle(Bytes bytes) {
    try {
        std::set<std::string> names;
        for (const auto& t : formats::parse_torch_pickle(bytes, "fuzz/data.pkl")) {
            expect(!t.name.empty() && names.insert(t.name).second, "empty or duplicate tensor name accepted");
            expect(t.shape.size() == t.stride.size(), "strides do not match the dimensions");
            expect(!t.storage_key.empty() && t.storage_key.find('/') == std::string::npos,
                   "storage key outside data/");
        }
    } catch (const InputError&) {
    }
}

struct Target {
    const char* name;  // the harness and its corpus folder: tests/fuzz/corpus/<name>
    void (*run)(Bytes);
};

// adapter_config.json (PEFT): the config's checks, then its per-module rules (target_modules,
// rank_pattern, alpha_pattern: user regular expressions) over ordinary, long and odd module names.
// Accepted ranks and alphas are positive and finite.
inline void lora_config(Bytes bytes) {
    try {
        const auto c = formats::parse_lora_config(bytes, "fuzz/adapter_config.json");
        expect(c.r > 0 && c.alpha > 0 && std::isfinite(c.alpha), "non-positive r or lora_alpha accepted");
        const std::string long_name = std::string(5000, 'm') + ".q_proj";
        for (const std::string module : {"base_model.model.layers.0.self_attn.q_proj", "q_proj", "", ".",
                                         "layers.1.mlp.down_proj", long_name.c_str()}) {
            try {
                (void)c.targets(module);
                if (const auto r = c.rank_for(module)) expect(*r > 0, "non-positive rank_pattern accepted");
                const double a = c.alpha_for(module);
                expect(a > 0 && std::isfinite(a), "non-positive alpha_pattern accepted");
            } catch (const InputError&) {
            }
        }
    } catch (const InputError&) {
    }
}

// An evaluator's stdout: the score rule and its per-chunk scores, without and with a --score-key. A
// score is any double (the non-finite ones are refused by name later), chunks finite doubles, or
// InputError; nothing else escapes.
inline void eval_output(Bytes bytes) {
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    for (const char* key : {"", "score", "metrics.score"}) {
        try {
            (void)sweep::parse_score(text, key, "--eval");
        } catch (const InputError&) {
        }
        try {
            for (const double c : sweep::parse_chunks(text, key, "--eval"))
                if (!std::isfinite(c)) std::abort();
        } catch (const InputError&) {
        }
    }
}

// A checkpoint's trainer_state.json: a global_step that is a non-negative integer, or nothing.
inline void trainer_state(Bytes bytes) {
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (const auto step = watch::parse_trainer_state(text); step && *step < 0) std::abort();
}

// A quantized checkpoint: config.json's text, a line "\x00\n", then a safetensors file. The pairing
// (formats/quantized_safetensors.hpp) may refuse; what it accepts decodes (within a size cap) to a
// logical matrix of the shape it announced, every part inside the file.
inline void quantized_pairing(Bytes bytes) {
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const auto split = text.find(std::string_view("\x00\n", 2));
    if (split == std::string_view::npos) return;
    auto owned = std::make_shared<std::vector<std::byte>>(
        bytes.begin() + static_cast<std::ptrdiff_t>(split + 2), bytes.end());
    formats::Checkpoint ck;
    ck.path = "fuzz";
    ck.format = formats::CheckpointFormat::safetensors;
    try {
        ck.config = formats::parse_config_json(bytes.first(split), "fuzz/config.json");
        const auto file = MappedFile::from_memory("fuzz.safetensors", owned, owned->data(), owned->size());
        const auto h = formats::parse_safetensors(file->bytes(), "fuzz.safetensors");
        for (const auto& e : h.tensors) {
            TensorInfo t;
            t.name = e.name, t.dtype = e.dtype, t.shape = e.shape, t.file = file;
            t.offset = h.data_start() + e.begin, t.nbytes = e.end - e.begin;
            ck.tensors.push_back(std::move(t));
        }
        formats::read_quantized_weights(ck, "fuzz/config.json");
    } catch (const InputError&) {
        return;
    }
    for (const auto& t : ck.tensors) {
        if (!t.quant) continue;
        for (const auto* part : t.quant->parts())
            expect(part->file && part->offset + part->nbytes <= owned->size(), "a part outside its file");
        expect(t.shape.size() == 2 && t.shape[0] == t.quant->rows && t.shape[1] == t.quant->cols,
               "a logical matrix whose shape is not its decoder's");
        if (t.quant->rows * t.quant->cols > (1 << 20)) continue;
        const auto m = read_matrix<float>(t, {0, t.quant->rows, 0, t.quant->cols, false});
        expect(static_cast<std::int64_t>(m.data.size()) == t.quant->rows * t.quant->cols, "decoded size");
    }
}

inline constexpr Target kTargets[] = {
    {"safetensors_header_fuzz", safetensors_header},
    {"shard_index_fuzz", shard_index},
    {"gguf_fuzz", gguf},
    {"config_geometry_fuzz", config_geometry},
    {"heads_csv_fuzz", heads_csv},
    {"zip_directory_fuzz", zip_directory},
    {"pickle_fuzz", pickle},
    {"lora_config_fuzz", lora_config},
    {"eval_output_fuzz", eval_output},
    {"trainer_state_fuzz", trainer_state},
    {"quantized_pairing_fuzz", quantized_pairing},
};

}  // namespace diffract::fuzz
