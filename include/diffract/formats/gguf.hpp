// GGUF: the llama.cpp / ggml model file format, versions 2 and 3 (little-endian only).
//
// Byte layout (all integers little-endian; a "string" is u64 byte length + UTF-8 bytes, no NUL):
//   u32   magic                 "GGUF" (bytes 47 47 55 46)
//   u32   version               2 or 3 (v1 used u32 counts and is rejected; v3 only added big-endian
//                               files, which are detected by their byte-swapped version and rejected)
//   u64   tensor_count
//   u64   kv_count
//   kv_count times:             metadata key/value pairs
//     string key
//     u32    value_type         0 UINT8, 1 INT8, 2 UINT16, 3 INT16, 4 UINT32, 5 INT32, 6 FLOAT32,
//                               7 BOOL (one byte, 0 or 1), 8 STRING, 9 ARRAY, 10 UINT64, 11 INT64,
//                               12 FLOAT64
//     value                     fixed-size scalar, string, or for ARRAY:
//                                 u32 element_type, u64 length, length elements (arrays may nest)
//   tensor_count times:         tensor infos
//     string name
//     u32    n_dims             1..4
//     u64    ne[n_dims]         ggml order: ne[0] is the innermost (contiguous) dimension
//     u32    ggml_type          0 F32, 1 F16, 8 Q8_0, 12 Q4_K, 30 BF16, ... (gguf_types_impl.hpp)
//     u64    offset             relative to the data section, a multiple of the alignment
//   padding                     zeros up to the next multiple of the alignment
//   data section                tensor bytes; alignment = general.alignment (u32) or 32
//
// Every untrusted byte is validated before use, in file order, with overflow-checked arithmetic:
// magic, version, counts bounded by the bytes left (so absurd counts fail before any allocation),
// string lengths inside the file, keys and tensor names valid UTF-8, known value types (arrays nest
// at most kGgufMaxArrayDepth deep), bools 0 or 1, no duplicate keys or tensor names,
// general.alignment a non-zero power of two of type UINT32, general.architecture a STRING, n_dims
// 1..4, element count <= INT64_MAX, a known ggml type, row length a multiple of the type's block
// size, offsets aligned, every tensor inside the file and no two tensors overlapping.
//
// Errors are InputError, one line: "<path>: tensor '<name>': <what> (expected X, found Y)";
// metadata problems read "<path>: metadata key '<key>': <what> ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/core/tensor.hpp"

namespace diffract::formats {

// Arrays with more elements than this are not materialised in GgufFile::metadata; they appear as
// {"gguf_array_type": "<element type name>", "length": n} (a tokenizer vocabulary has ~100k strings).
inline constexpr std::uint64_t kGgufMaxInlineArray = 256;
// Arrays of arrays are allowed up to this nesting depth (1 = a plain array).
inline constexpr int kGgufMaxArrayDepth = 8;
inline constexpr std::uint32_t kGgufDefaultAlignment = 32;
// magic, version, tensor_count, kv_count: the bytes before the metadata.
inline constexpr std::uint64_t kGgufHeaderBytes = 4 + 4 + 8 + 8;

struct GgufFile {
    std::shared_ptr<const MappedFile> file;  // null for parse_gguf_bytes results
    std::uint32_t version = 0;
    std::uint32_t alignment = kGgufDefaultAlignment;
    std::uint64_t data_offset = 0;  // absolute offset of the data section
    // Where the metadata key/value pairs end (and the tensor infos begin): [kGgufHeaderBytes, kv_end) is the
    // metadata as stored, which the writer copies byte for byte.
    std::uint64_t kv_end = 0;
    // key -> value. Integers stay integers (UINT64 as unsigned), FLOAT32/FLOAT64 become doubles
    // (a float32 widened exactly), BOOL a boolean, STRING a string (invalid UTF-8 sequences in values
    // are replaced by U+FFFD so that the JSON can always be dumped), ARRAY a JSON array or, if longer
    // than kGgufMaxInlineArray, the summary object above.
    nlohmann::json metadata = nlohmann::json::object();
    // In file order. shape is row-major, i.e. the reversed ggml ne: ne = [cols, rows] -> {rows, cols}.
    // offset is absolute (data_offset + the tensor's relative offset).
    // dtype: F32/F16/BF16/F64, I8/I16/I32/I64, or the block-quantised DType of every ggml type that
    // core/block_quant.hpp decodes (Q4_0 ... Q6_K, IQ*, TQ1_0, TQ2_0, MXFP4, NVFP4). Any other ggml type
    // (Q8_1, Q8_K, repacked variants, Q1_0) is reported as DType::U8 with its name in unsupported_types,
    // nbytes taken from the ggml block table (then TensorInfo::numel() counts logical elements).
    std::vector<TensorInfo> tensors;
    std::vector<std::uint32_t> ggml_types;                 // per tensor, its stored ggml type id
    std::string architecture;                              // general.architecture or ""
    std::map<std::string, std::string> unsupported_types;  // tensor name -> ggml type name, e.g. "Q4_K"
};

// The metadata's model geometry as the HF config.json keys the schema reads (model_type,
// architectures, num_attention_heads, num_key_value_heads, hidden_size, head_dim,
// num_hidden_layers, intermediate_size). Every geometry key is validated by the rule of
// model::geometry_value, named "metadata key '<arch>.<key>'"; throws InputError naming `label`.
nlohmann::json gguf_config(const GgufFile& f, const std::string& label);

// True for the architectures (general.architecture) whose Q/K projections llama.cpp's
// convert_hf_to_gguf.py writes in its RoPE row layout (LlamaModel.permute): llama, granite,
// granitemoe, smollm3, arcee, minicpm.
bool gguf_rope_permuted(std::string_view architecture);

// For those architectures, marks blk.N.attn_q/attn_k weights and biases with TensorInfo::rope_head_rows
// (the rows of one head: rows / head_count for Q, rows / head_count_kv for K, per-layer arrays read at
// N) so that every reader sees the Hugging Face row order. Tensors whose rows do not split into heads
// of an even row count (no converter writes them) stay in stored order. Called by parse_gguf_bytes.
void undo_gguf_rope_layout(GgufFile& f);

// Validates and parses a complete GGUF file held in `bytes`; `label` (normally the path) prefixes
// every error. The TensorInfos have a null `file`; Q/K of Llama-family files carry their RoPE row order
// (undo_gguf_rope_layout). Throws InputError.
GgufFile parse_gguf_bytes(std::span<const std::byte> bytes, const std::string& label);

// parse_gguf_bytes over a mapping; sets `file` in the result and in every TensorInfo.
GgufFile parse_gguf(std::shared_ptr<const MappedFile> file);

// Maps `path` read-only and parses it.
GgufFile open_gguf(const std::string& path);

// The ggml spelling of a tensor's storage type in `f` ("F32", "Q8_0", "Q4_K", ...).
std::string gguf_type_name(const GgufFile& f, const TensorInfo& t);

}  // namespace diffract::formats
