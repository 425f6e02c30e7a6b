#include "diffract/core/output_path.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace fs = std::filesystem;

namespace diffract {

fs::path physical_path(const std::string& path) {
    std::error_code ec;
    auto c = fs::weakly_canonical(fs::absolute(path, ec), ec);
    return ec ? fs::absolute(path).lexically_normal() : c.lexically_normal();
}

std::string_view file_type_name(fs::file_type t) {
    switch (t) {
        case fs::file_type::regular:
            return "a regular file";
        case fs::file_type::directory:
            return "a directory";
        case fs::file_type::character:
            return "a character device";
        case fs::file_type::block:
            return "a block device";
        case fs::file_type::fifo:
            return "a FIFO";
        case fs::file_type::socket:
            return "a socket";
        case fs::file_type::symlink:
            return "a symbolic link";
        default:
            return "neither a file nor a directory";
    }
}

namespace {

// Whether `inner` is `outer` or lies below it, component by component.
bool within(const fs::path& inner, const fs::path& outer) {
    auto i = inner.begin();
    for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
        if (o->empty()) continue;  // a trailing separator
        if (i == inner.end() || *i != *o) return false;
    }
    return true;
}

}  // namespace

void check_output_kind(const std::string& out, OutputKind kind, const std::string& flag) {
    std::error_code ec;
    const auto st = fs::status(out, ec);  // through links: what a rename would replace is resolved too
    if (ec || !fs::exists(st)) return;
    const bool fits = kind == OutputKind::file ? fs::is_regular_file(st) : fs::is_directory(st);
    if (!fits)
        throw_input_error(out, "",
                          fmt::format("{} exists and is {}, not {}; refusing to replace it", flag,
                                      file_type_name(st.type()),
                                      kind == OutputKind::file ? "a regular file" : "a directory"));
}

void check_output_path(const std::string& out, const std::vector<std::string>& protected_paths,
                       const std::string& flag) {
    if (out.empty()) throw InputError(fmt::format("{}: an empty path", flag));
    const fs::path target = physical_path(out);
    for (const auto& p : protected_paths) {
        if (p.empty()) continue;
        const fs::path in = physical_path(p);
        const char* how = target == in         ? "is"
                          : within(in, target) ? "contains"
                          : within(target, in) ? "lies inside"
                                               : nullptr;
        if (how)
            throw_input_error(
                out, "",
                fmt::format("{} {} an input or the results store ({}); nothing was written", flag, how, p));
    }
}

}  // namespace diffract
