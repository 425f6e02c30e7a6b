#include "diffract/core/tensor.hpp"

namespace diffract {

std::int64_t TensorInfo::numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

const std::string& TensorInfo::path() const {
    static const std::string none;
    return file ? file->path() : none;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

}  // namespace diffract
