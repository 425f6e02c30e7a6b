// WeightWatcher's conventions (`analyze --convention weightwatcher`): its per-layer columns computed
// from our singular values and power-law fit, with its definitions (eigenvalues lambda = sigma^2, no
// 1/N). docs/weightwatcher.md maps every column to ours.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "diffract/core/names.hpp"

namespace diffract::analysis {

enum class Convention { diffract, weightwatcher };
inline constexpr NameTable<Convention, 2> kConventionNames{
    {{Convention::diffract, "diffract"}, {Convention::weightwatcher, "weightwatcher"}}};
// "diffract" or "weightwatcher"; throws InputError otherwise.
Convention parse_convention(const std::string& text);

struct WeightWatcherRow {
    int layer_id = 0;  // our order of the analysed whole matrices (WeightWatcher counts torch modules)
    std::string name;  // the tensor name without ".weight" (WeightWatcher's module name)
    std::int64_t rows = 0, cols = 0;
    std::vector<std::pair<std::string, double>> values;  // columns in weightwatcher_columns() order
    std::string status, warning;
};

// The layers WeightWatcher 0.7.7 analyses with its defaults (layer_supported): at least min_evals = 8
// and at most max_evals = 15000 eigenvalues (M, the shorter side), and N (the longer side) at most
// max_N = 50000, so a 128k-token embedding is not a WeightWatcher layer. weightwatcher.csv writes
// those only, so that its means are get_summary's; metrics.csv has every matrix.
inline constexpr std::int64_t kWeightWatcherMinEvals = 8, kWeightWatcherMaxEvals = 15000,
                              kWeightWatcherMaxN = 50000;
inline bool weightwatcher_analyses(std::int64_t rows, std::int64_t cols) {
    const auto m = std::min(rows, cols), n = std::max(rows, cols);
    return m >= kWeightWatcherMinEvals && m <= kWeightWatcherMaxEvals && n <= kWeightWatcherMaxN;
}

// The numeric columns, in the order weightwatcher.csv writes them (after layer_id and name).
const std::vector<std::string>& weightwatcher_columns();

// One layer's row from its singular values (any order) and the machine epsilon of the precision they
// were computed in (numpy's matrix_rank threshold sigma_max * N * eps; WeightWatcher decomposes in f64). NaN
// everywhere for an empty or non-finite spectrum (status "failed").
WeightWatcherRow weightwatcher_row(int layer_id, const std::string& tensor_name, std::int64_t rows,
                                   std::int64_t cols, std::span<const double> singular_values, double eps);

// weightwatcher.csv: layer_id,name,<columns>,status,warning.
std::string weightwatcher_csv(const std::vector<WeightWatcherRow>& rows);

}  // namespace diffract::analysis
