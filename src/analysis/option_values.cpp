#include "diffract/analysis/option_values.hpp"

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract::analysis {

Precision parse_precision(std::string_view text) {
    if (text == "f32") return Precision::f32;
    if (text == "f64") return Precision::f64;
    throw InputError(fmt::format("--precision: expected f32 or f64, found '{}'", text));
}

linalg::SvdRoute parse_svd_route(std::string_view text, std::string_view flag) {
    if (text == "auto") return linalg::SvdRoute::auto_route;
    if (text == "gesdd") return linalg::SvdRoute::gesdd;
    if (text == "gram") return linalg::SvdRoute::gram;
    throw InputError(fmt::format("{}: expected auto, gesdd or gram, found '{}'", flag, text));
}

}  // namespace diffract::analysis
