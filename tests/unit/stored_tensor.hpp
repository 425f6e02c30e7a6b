// A stored tensor in memory for the unit tests: the values of a matrix in a storage dtype, viewed as
// a checkpoint's TensorInfo (what the backends' block_singular_values read).
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "diffract/core/dtype.hpp"
#include "diffract/core/matrix.hpp"

namespace diffract::test_data {

// `w` rounded to `dtype` (f64 kept exactly), stored row-major under `name`.
inline TensorInfo stored_tensor(const Matrix<double>& w, DType dtype,
                                const std::string& name = "model.layers.0.self_attn.q_proj.weight") {
    auto bytes = std::make_shared<std::vector<std::byte>>(w.data.size() * dtype_size(dtype));
    if (dtype == DType::F64) {
        std::memcpy(bytes->data(), w.data.data(), bytes->size());
    } else {
        std::vector<float> narrow(w.data.begin(), w.data.end());
        convert_from_f32(narrow.data(), dtype, narrow.size(), bytes->data());
    }
    TensorInfo t;
    t.name = name, t.dtype = dtype, t.shape = {w.rows, w.cols};
    t.file = MappedFile::from_memory("memory:test", bytes, bytes->data(), bytes->size());
    t.nbytes = bytes->size();
    return t;
}

}  // namespace diffract::test_data
