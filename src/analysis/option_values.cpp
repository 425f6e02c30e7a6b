#include "diffract/analysis/option_values.hpp"

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract::analysis {

Precision parse_precision(std::string_view text) {
    if (const auto p = value_of(kPrecisionNames, text)) return *p;
    throw InputError(fmt::format("--precision: expected {}, found '{}'", choice_list(kPrecisionNames), text));
}

linalg::SvdRoute parse_svd_route(std::string_view text, std::string_view flag) {
    if (const auto r = value_of(linalg::kSvdRouteNames, text)) return *r;
    throw InputError(
        fmt::format("{}: expected {}, found '{}'", flag, choice_list(linalg::kSvdRouteNames), text));
}

KernelConfig parse_kernel_options(const KernelOptionText& text) {
    KernelConfig k;
    k.precision = parse_precision(text.precision);
    k.route = parse_svd_route(text.svd_route);
    k.rand_seed = text.seed;
    k.min_fit_size = text.min_fit_size;
    k.alpha_ci_draws = text.alpha_ci;
    k.alpha_ci_seed = text.alpha_ci_seed;
    k.null_draws = text.null_draws;
    k.p_value_bootstraps = text.p_value_draws;
    return k;
}

}  // namespace diffract::analysis
