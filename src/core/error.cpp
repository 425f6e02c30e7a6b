#include "diffract/core/error.hpp"

namespace diffract {

std::string error_context(std::string_view source, std::string_view tensor, std::string_view what) {
    std::string out;
    if (!source.empty()) {
        out.append(source);
        out.append(": ");
    }
    if (!tensor.empty()) {
        out.append("tensor '");
        out.append(tensor);
        out.append("': ");
    }
    out.append(what);
    return out;
}

void throw_input_error(std::string_view source, std::string_view tensor, std::string_view what) {
    throw InputError(error_context(source, tensor, what));
}

}  // namespace diffract
