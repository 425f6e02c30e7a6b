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
