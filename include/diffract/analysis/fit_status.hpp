// The status of a spectral fit (pl_status, tpl_status, expon_status, mp_status): how far its numbers can
// be trusted. Stored and exchanged as a small integer code (every field value is an f64); the CSVs and
// Python write the names. docs/metrics.md has the rules that set each status.
#pragma once

#include <cmath>
#include <optional>
#include <string_view>

#include "diffract/core/names.hpp"

namespace diffract::analysis {

enum class FitStatus {
    ok = 0,               // fitted
    too_few = 1,          // fewer points than the minimum fit size: values kept, not to be trusted
    no_convergence = 2,   // the optimiser stopped at its evaluation limit before its tolerances held
    at_bound_alpha = 3,   // alpha within the optimiser's tolerance of its lower bound 1
    at_bound_lambda = 4,  // Lambda within the optimiser's tolerance of its lower bound 0
};

inline constexpr NameTable<FitStatus, 5> kFitStatusNames{{{FitStatus::ok, "ok"},
                                                          {FitStatus::too_few, "too_few"},
                                                          {FitStatus::no_convergence, "no_convergence"},
                                                          {FitStatus::at_bound_alpha, "at_bound:alpha"},
                                                          {FitStatus::at_bound_lambda, "at_bound:lambda"}}};

inline constexpr std::string_view fit_status_name(FitStatus s) {
    const auto name = name_of(kFitStatusNames, s);
    return name.empty() ? "unknown" : name;
}

// The name of a stored code; "nan" for NaN (a matrix that was not analysed), "unknown" for a code
// outside the table.
inline std::string_view fit_status_name(double code) {
    if (std::isnan(code)) return "nan";
    for (const auto& row : kFitStatusNames)
        if (code == static_cast<double>(row.value)) return row.name;
    return "unknown";
}

// The code of a name as the CSVs write it ("nan" and "" are NaN); nullopt for an unknown name.
inline std::optional<double> fit_status_code(std::string_view name) {
    if (name.empty() || name == "nan") return std::nan("");
    if (const auto s = value_of(kFitStatusNames, name)) return static_cast<double>(*s);
    return std::nullopt;
}

// Whether a field holds a FitStatus code: pl_status, tpl_status, expon_status, mp_status.
inline constexpr bool is_status_field(std::string_view field) {
    return field == "pl_status" || field == "tpl_status" || field == "expon_status" || field == "mp_status";
}

}  // namespace diffract::analysis
