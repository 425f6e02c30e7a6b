// Writing an edited GGUF file: the source file's metadata byte for byte, its tensors in its order,
// each either copied as stored (any ggml type, quantised blocks included) or rewritten.
//
// A rewritten tensor is stored as F32, F16, BF16 or F64 (the edits write a block-quantised tensor they
// changed as F32: its values are exact there, and llama.cpp's quantize tool re-quantises it if wanted).
// The producer gives its values in logical (Hugging Face) row order; Q/K rows that the source holds in
// llama.cpp's RoPE layout (TensorInfo::rope_head_rows) are put back into that layout.
//
// Tensor data is laid out in tensor-info order at the source's alignment (general.alignment), so a
// file whose tensors are all copied equals a source written the same way (gguf-py, llama.cpp) byte
// for byte.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diffract/formats/checkpoint_writer.hpp"
#include "diffract/formats/gguf.hpp"

namespace diffract::formats {

// The ggml type id of a plain dtype that GGUF stores (F32, F16, BF16, F64, I8..I64); nullopt otherwise.
std::optional<std::uint32_t> gguf_type_id(DType dtype);

// Writes the GGUF file `path`. rewritten[i]: the dtype tensor i of `source` is written in, or nullopt
// to copy its stored bytes. `produce(spec, out)` is called for every tensor, in order: for a copied
// tensor `out` takes its stored bytes, for a rewritten one its values in spec.dtype, logical row order.
void write_gguf(const std::string& path, const GgufFile& source,
                const std::vector<std::optional<DType>>& rewritten, const TensorProducer& produce);

}  // namespace diffract::formats
