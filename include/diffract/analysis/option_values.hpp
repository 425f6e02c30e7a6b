// The text values of the computing options, parsed as the CLI parses them (same InputError messages),
// for front ends other than the CLI (the Python bindings).
#pragma once

#include <string_view>

#include "diffract/analysis/catalog.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::analysis {

// "f32" | "f64"; throws InputError "--precision: expected f32 or f64, found '<text>'".
Precision parse_precision(std::string_view text);
// "auto" | "gesdd" | "gram"; throws InputError "<flag>: expected auto, gesdd or gram, found '<text>'".
linalg::SvdRoute parse_svd_route(std::string_view text, std::string_view flag = "--svd-route");

}  // namespace diffract::analysis
