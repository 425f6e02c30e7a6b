#include "diffract/core/byte_size.hpp"

#include <cctype>
#include <cmath>
#include <exception>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract {

std::uint64_t parse_size(const std::string& text, const std::string& flag) {
    std::size_t pos = 0;
    double v = 0;
    try {
        v = std::stod(text, &pos);
    } catch (const std::exception&) {
        throw InputError(fmt::format("{}: '{}' is not a size (e.g. 8G, 512M)", flag, text));
    }
    std::string unit = text.substr(pos);
    for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (unit.ends_with("IB"))
        unit.resize(unit.size() - 2);
    else if (unit.ends_with("B"))
        unit.resize(unit.size() - 1);
    double mult = 1;
    if (unit == "K")
        mult = 1024.0;
    else if (unit == "M")
        mult = 1024.0 * 1024;
    else if (unit == "G")
        mult = 1024.0 * 1024 * 1024;
    else if (unit == "T")
        mult = 1024.0 * 1024 * 1024 * 1024;
    else if (!unit.empty())
        throw InputError(fmt::format("{}: unknown size unit in '{}'", flag, text));
    if (!std::isfinite(v) || v <= 0)
        throw InputError(fmt::format("{}: size must be a positive number, found '{}'", flag, text));
    const double bytes = v * mult;
    if (bytes < 1) throw InputError(fmt::format("{}: '{}' is less than one byte", flag, text));
    // 2^64: the first double a 64-bit byte count cannot hold.
    if (bytes >= 18446744073709551616.0)
        throw InputError(fmt::format("{}: '{}' is beyond 2^64 bytes", flag, text));
    return static_cast<std::uint64_t>(bytes);
}

}  // namespace diffract
