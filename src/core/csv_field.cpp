#include "diffract/core/csv_field.hpp"

#include <cmath>

#include <fmt/format.h>

namespace diffract {

std::string csv_field(std::string_view s) {
    if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string(s);
    std::string out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

std::string format_value(double v) {
    if (std::isnan(v)) return "nan";
    return fmt::format("{}", v);
}

}  // namespace diffract
