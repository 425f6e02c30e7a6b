#include "diffract/core/error.hpp"

#include <fmt/format.h>

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

std::string one_line(std::string_view text) {
    std::string out;
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f)
            out += fmt::format("\\x{:02x}", c);
        else
            out.push_back(ch);
    }
    return out;
}

void throw_input_error(std::string_view source, std::string_view tensor, std::string_view what) {
    throw InputError(error_context(source, tensor, what));
}

}  // namespace diffract
