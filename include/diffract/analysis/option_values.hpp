// The text values of the computing options, parsed as the CLI parses them (same InputError messages),
// for front ends other than the CLI (the Python bindings).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "diffract/analysis/catalog.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::analysis {

// "f32" | "f64"; throws InputError "--precision: expected f32 or f64, found '<text>'".
Precision parse_precision(std::string_view text);
// "auto" | "gesdd" | "gram"; throws InputError "<flag>: expected auto, gesdd or gram, found '<text>'".
linalg::SvdRoute parse_svd_route(std::string_view text, std::string_view flag = "--svd-route");

// The metric kernel's options as the CLI and Python spell them (--precision, --svd-route, --seed,
// --min-fit-size, --alpha-ci, --alpha-ci-seed, --null-draws, --p-value-draws): one conversion into
// KernelConfig for every command that computes the catalog (analyze, watch), in both front ends.
struct KernelOptionText {
    std::string precision = "f64", svd_route = "auto";
    std::int64_t seed = 42;
    int min_fit_size = kDefaultMinFitSize;
    int alpha_ci = 0;
    std::uint64_t alpha_ci_seed = 0;
    int null_draws = 1;
    int p_value_draws = kDefaultPValueDraws;
};
KernelConfig parse_kernel_options(const KernelOptionText& text);

}  // namespace diffract::analysis
