// WeightWatcher's per-layer columns (weightwatcher 0.7.7, `WeightWatcher.analyze()` defaults) from our
// singular values: its eigenvalues are sigma^2 without 1/N; its power-law fit is powerlaw's on the
// eigenvalues above EVALS_THRESH = 1e-5, which our fit_power_law reproduces.
#include "diffract/analysis/weightwatcher.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/csv_field.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/numbers.hpp"

namespace diffract::analysis {
namespace {

constexpr double kEvalsThresh = 1e-5;                      // WeightWatcher's EVALS_THRESH: eigenvalues fitted
constexpr double kWeakRankTolerance = 1e-6;                // WEAK_RANK_LOSS_TOLERANCE
constexpr double kEntropyEpsilon = 1e-10;                  // EPSILON in matrix_entropy
constexpr double kOverTrained = 2.0, kUnderTrained = 6.0;  // OVER/UNDER_TRAINED_THRESH

}  // namespace

Convention parse_convention(const std::string& text) {
    if (const auto c = value_of(kConventionNames, text)) return *c;
    throw InputError(
        fmt::format("--convention: expected {}, found '{}'", choice_list(kConventionNames), text));
}

const std::vector<std::string>& weightwatcher_columns() {
    static const std::vector<std::string> c = {"D",
                                               "M",
                                               "N",
                                               "Q",
                                               "alpha",
                                               "alpha_weighted",
                                               "entropy",
                                               "lambda_max",
                                               "log_alpha_norm",
                                               "log_norm",
                                               "log_spectral_norm",
                                               "matrix_rank",
                                               "norm",
                                               "num_evals",
                                               "num_pl_spikes",
                                               "rank_loss",
                                               "sigma",
                                               "spectral_norm",
                                               "stable_rank",
                                               "sv_max",
                                               "sv_min",
                                               "weak_rank_loss",
                                               "xmax",
                                               "xmin"};
    return c;
}

WeightWatcherRow weightwatcher_row(int layer_id, const std::string& tensor_name, std::int64_t rows,
                                   std::int64_t cols, std::span<const double> singular_values, double eps) {
    WeightWatcherRow r;
    r.layer_id = layer_id;
    constexpr std::string_view suffix = ".weight";
    r.name = tensor_name.size() > suffix.size() && tensor_name.ends_with(suffix)
                 ? tensor_name.substr(0, tensor_name.size() - suffix.size())
                 : tensor_name;
    r.rows = rows, r.cols = cols;
    const double M = static_cast<double>(std::min(rows, cols)), N = static_cast<double>(std::max(rows, cols));
    std::vector<double> sv(singular_values.begin(), singular_values.end());
    std::sort(sv.begin(), sv.end());
    const bool valid =
        !sv.empty() && std::all_of(sv.begin(), sv.end(), [](double s) { return std::isfinite(s); });
    std::map<std::string, double> v;
    for (const auto& c : weightwatcher_columns()) v[c] = kNaN;
    v["M"] = M, v["N"] = N, v["Q"] = M > 0 ? N / M : kNaN;
    r.status = "failed";
    if (valid) {
        std::vector<double> evals(sv.size());
        for (std::size_t i = 0; i < sv.size(); ++i) evals[i] = sv[i] * sv[i];
        double norm = 0;
        for (double e : evals) norm += e;
        const double lambda_max = evals.back();
        const double tol = sv.back() * N * eps;  // numpy.linalg.matrix_rank's default
        const auto rank = std::count_if(sv.begin(), sv.end(), [&](double s) { return s > tol; });
        double h = 0;
        for (double e : evals) {
            const double p = e / norm + kEntropyEpsilon;
            h -= p * std::log(p);
        }
        v["num_evals"] = static_cast<double>(evals.size());
        v["norm"] = norm;
        v["log_norm"] = std::log10(norm);
        v["lambda_max"] = v["spectral_norm"] = v["xmax"] = lambda_max;
        v["log_spectral_norm"] = std::log10(lambda_max);
        v["stable_rank"] = norm / lambda_max;
        v["sv_max"] = sv.back();
        v["sv_min"] = sv.front();
        v["matrix_rank"] = static_cast<double>(rank);
        v["rank_loss"] = static_cast<double>(static_cast<std::int64_t>(sv.size()) - rank);
        v["weak_rank_loss"] = static_cast<double>(
            std::count_if(evals.begin(), evals.end(), [](double e) { return e < kWeakRankTolerance; }));
        v["entropy"] = h / std::log(static_cast<double>(rank) + kEntropyEpsilon);
        std::vector<double> fitted;
        for (double e : evals)
            if (e > kEvalsThresh) fitted.push_back(e);
        const TailFit fit = fit_power_law(fitted);
        if (std::isfinite(fit.alpha)) {
            const double alpha = fit.alpha;
            const auto spikes =
                std::count_if(evals.begin(), evals.end(), [&](double e) { return e >= fit.xmin; });
            double alpha_norm = 0;
            for (double e : evals) alpha_norm += std::pow(e, alpha);
            v["alpha"] = alpha;
            v["xmin"] = fit.xmin;
            v["D"] = fit.ks;
            v["num_pl_spikes"] = static_cast<double>(spikes);
            v["sigma"] = (alpha - 1.0) / std::sqrt(static_cast<double>(fit.n_tail));
            v["alpha_weighted"] = alpha * std::log10(lambda_max);
            v["log_alpha_norm"] = std::log10(alpha_norm);
            r.status = "success";
            r.warning =
                alpha < kOverTrained ? "over-trained" : (alpha > kUnderTrained ? "under-trained" : "");
        }
    }
    for (const auto& c : weightwatcher_columns()) r.values.emplace_back(c, v[c]);
    return r;
}

std::string weightwatcher_csv(const std::vector<WeightWatcherRow>& rows) {
    std::string csv = "layer_id,name";
    for (const auto& c : weightwatcher_columns()) csv += "," + c;
    csv += ",status,warning\n";
    for (const auto& r : rows) {
        csv += fmt::format("{},{}", r.layer_id, csv_field(r.name));
        for (const auto& [name, value] : r.values) csv += "," + format_value(value);
        csv += fmt::format(",{},{}\n", r.status, r.warning);
    }
    return csv;
}

}  // namespace diffract::analysis
