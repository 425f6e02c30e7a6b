// A tensor's values as a plain tensor in logical row order, for code that works on stored bytes
// (the edits): GGUF tensors may be block-quantised or hold Q/K rows in llama.cpp's RoPE layout.
#pragma once

#include "diffract/core/tensor.hpp"

namespace diffract {

// True when the tensor is stored as plain values in logical row order (no block type, no RoPE layout).
bool is_plain(const TensorInfo& t);

// `t` itself when is_plain(t). Otherwise a tensor of the same name and shape whose bytes are computed
// on first read (MappedFile::generated, labelled with t's path): block-quantised types dequantised to
// F32 (exact: ggml dequantises to f32), other dtypes kept, rows put in logical (Hugging Face) order.
// A writer that keeps the stored layout puts edited rows back with TensorInfo::stored_row.
TensorInfo plain_view(const TensorInfo& t);

}  // namespace diffract
