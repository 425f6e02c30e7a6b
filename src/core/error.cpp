#include "diffract/core/error.hpp"

#include <cerrno>

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

bool is_environment_error(const std::error_code& code) {
    if (code.category() != std::generic_category() && code.category() != std::system_category()) return false;
    switch (code.value()) {
        case ENOSPC:
        case EDQUOT:
        case EFBIG:
        case EIO:
        case EMFILE:
        case ENFILE:
        case ENOENT:
        case ENOTDIR:
        case EISDIR:
        case EEXIST:
        case ENOTEMPTY:
        case EACCES:
        case EPERM:
        case EROFS:
        case ENAMETOOLONG:
        case ELOOP:
        case EPIPE:
        case EBADF:
        case EXDEV:
        case EBUSY:
        case ETXTBSY:
        case ENOMEM:
            return true;
        default:
            return false;
    }
}

}  // namespace diffract
