// A tensor stored in a checkpoint file: name, dtype, shape and a view of its bytes in the mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "diffract/core/dtype.hpp"
#include "diffract/core/mapped_file.hpp"

namespace diffract {

struct LowRankUpdate;
struct QuantizedWeight;
struct PackedSlot;

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;  // row-major, outermost first (as safetensors / torch)
    std::shared_ptr<const MappedFile> file;
    std::size_t offset = 0;  // absolute byte offset of the data in `file`
    std::size_t nbytes = 0;
    // Row order. 0: rows are stored in order. n > 0: each group of n rows (one attention head) is
    // stored in llama.cpp's RoPE layout, the halves interleaved: logical row j * n/2 + i of a group
    // is stored at row 2i + j (i < n/2, j < 2). GGUF Q/K projections of Llama-family models are
    // written this way by convert_hf_to_gguf.py; readers see the Hugging Face order.
    std::int64_t rope_head_rows = 0;
    // Set when the values are a base tensor plus a low-rank update (a LoRA adapter merged into the
    // base): the bytes are still the merged values, and analyses may use the factors instead (compare
    // computes such a delta in factored form).
    std::shared_ptr<const LowRankUpdate> low_rank;
    // Set when the values are decoded from a quantized layout (core/quantized.hpp): the dtype is then
    // F32 and the shape the logical matrix's; read_matrix decodes from the stored parts, and `bytes()`
    // (a generated file) gives the dense f32 values for the few readers that need them whole.
    std::shared_ptr<const QuantizedWeight> quant;
    // Set when the tensor is one expert's matrix (or bias) inside a packed mixture-of-experts tensor
    // (formats/packed_experts.hpp): where its elements lie in the packed tensor, so that an edit writes
    // the packed tensor back in its own layout.
    std::shared_ptr<const PackedSlot> packed;

    std::int64_t numel() const;
    // The stored row holding logical row r (r itself unless rope_head_rows is set).
    std::int64_t stored_row(std::int64_t r) const;
    std::span<const std::byte> bytes() const { return file->bytes().subspan(offset, nbytes); }
    // The file's path ("" for a tensor not backed by a file, as in tests and in-memory models).
    const std::string& path() const;
    // Drops the tensor's mapped pages from memory (MappedFile::dont_need): read again from the file if
    // needed, so a reader past a tensor keeps resident memory small. Nothing for a tensor without a file.
    void release_pages() const;
};

// base + scale · L·R in stored coordinates (L: stored rows × r, R: r × stored columns), with L·R = B·A
// of a LoRA module, or Aᵀ·Bᵀ when `transposed` (fan_in_fan_out weights, embeddings). The factors are
// as the adapter stores them: A [r, in] (lora_embedding_A: [r, vocab]), B [out, r].
struct LowRankUpdate {
    TensorInfo base;
    TensorInfo a, b;
    std::int64_t rank = 0;
    double scale = 0;
    bool transposed = false;
};

// Where one expert's logical matrix lies in its packed tensor: logical element (r, c) is element
// first + r·row_stride + c·col_stride of `source` (a bias: rows × 1, col_stride 0).
struct PackedSlot {
    TensorInfo source;  // the packed tensor as stored
    std::int64_t first = 0, row_stride = 0, col_stride = 0;
    std::int64_t rows = 0, cols = 1;
};

// The stored tensors whose bytes make up `t`: itself, or for a tensor computed on demand its parts (a
// LoRA-merged tensor's base and factors, a quantized matrix's codes, scales and the rest).
std::vector<const TensorInfo*> stored_parts(const TensorInfo& t);

// A view of the elements [first, first + product(shape)) of `t`, with that shape (one expert of a packed
// tensor). The range must lie inside `t` (the caller checked); block types slice whole rows.
TensorInfo element_slice(const TensorInfo& t, std::int64_t first, std::vector<std::int64_t> shape);

// The shape as "[a, b, c]".
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace diffract
