// The field table. Formulas restate ../shared/reference/metrics.md; docs/metrics.md documents
// tolerances and our decisions where the reference is ambiguous.
#include "diffract/analysis/catalog.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/split_list.hpp"

namespace diffract::analysis {

using L = Level;

const std::vector<FieldInfo>& field_catalog() {
    static const std::vector<FieldInfo> fields = {
        {"greater_dim", L::parameter, false, "N = max(m, n)", "weights"},
        {"lower_dim", L::parameter, false, "M = min(m, n)", "weights"},
        {"aspect_ratio", L::parameter, false, "Q = N / M", "weights"},
        {"weights_std", L::parameter, false, "population std of the entries of W (ddof 0)", "weights"},
        {"weights_svals", L::parameter, true, "singular values, ascending", "weights"},
        {"weights_lsvs", L::parameter, true, "left singular vectors U, columns in ascending order", "weights",
         false},
        {"weights_rsvs", L::parameter, true, "right singular vectors V, columns in ascending order",
         "weights", false},
        {"max_weights_sval", L::parameter, false, "sigma_M (largest)", "weights_svals"},
        {"min_weights_sval", L::parameter, false, "sigma_1 (smallest)", "weights_svals"},
        {"esd", L::parameter, true, "lambda_i = sigma_i^2 / N", "weights_svals"},
        {"esd_max", L::parameter, false, "max lambda", "esd"},
        {"esd_min", L::parameter, false, "min lambda", "esd"},
        {"weights_rand_svals", L::parameter, true,
         "singular values of the permutation null (all entries of W permuted, seed 42)", "weights"},
        {"esd_rand", L::parameter, true, "sigma_rand^2 / N", "weights_rand_svals"},
        {"esd_rand_max", L::parameter, false, "max esd_rand", "esd_rand"},
        {"esd_rand_min", L::parameter, false, "min esd_rand", "esd_rand"},
        {"max_weights_rand_sval", L::parameter, false, "largest singular value of the null",
         "weights_rand_svals"},
        {"min_weights_rand_sval", L::parameter, false, "smallest singular value of the null",
         "weights_rand_svals"},
        {"frob_norm", L::parameter, false, "sqrt(sum sigma_i^2)", "weights_svals"},
        {"nuclear_norm", L::parameter, false, "sum sigma_i", "weights_svals"},
        {"l2_norm", L::parameter, false, "sigma_max", "weights_svals"},
        {"stable_rank", L::parameter, false, "(frob_norm / (l2_norm + EPS))^2, EPS = 1e-16", "weights_svals"},
        {"effective_rank", L::parameter, false,
         "exp(-sum p_i ln(p_i + EPS)), p_i = sigma_i / (sum sigma + EPS)", "weights_svals"},
        {"hard_rank", L::parameter, false, "#{lambda_i > rtol * lambda_max}, rtol = 1e-5", "esd"},
        {"mp_esd_max", L::parameter, false,
         "min(lambda_+, esd_max); lambda_+ = s^2 (1 + 1/sqrt(Q))^2, s^2 = weights_std^2 or, when esd_rand "
         "exceeds that edge, (sum of esd_rand <= edge) / M",
         "esd, esd_rand, weights_std"},
        {"mp_esd_min", L::parameter, false, "s^2 (1 - 1/sqrt(Q))^2", "esd, esd_rand, weights_std"},
        {"mp_bulk_std", L::parameter, false, "s of the Marchenko-Pastur fit", "esd, esd_rand, weights_std"},
        {"mp_sval_max", L::parameter, false, "sqrt(mp_esd_max * N)", "mp_esd_max"},
        {"mp_ks", L::parameter, false,
         "KS distance between eigenvalues inside (mp_esd_min, mp_esd_max) and the MP CDF conditioned on that "
         "window; 1 if empty",
         "esd, mp fit"},
        {"mp_concentration", L::parameter, false, "#{lambda_- <= lambda_i <= lambda_+} / M", "esd, mp fit"},
        {"mp_presence", L::parameter, false,
         "clip((lambda_+ - lambda_-) / (lambda_max - lambda_min + EPS), 0, 1)", "esd, mp fit"},
        {"mp_num_spikes", L::parameter, false, "#{lambda_i > mp_esd_max}", "esd, mp fit"},
        {"mp_soft_rank", L::parameter, false, "mp_esd_max / (esd_max + EPS)", "esd, mp fit"},
        {"mp_n_bulk", L::parameter, false,
         "#{mp_esd_min <= lambda_i <= mp_esd_max} (0 when the fit is undefined)", "esd, mp fit"},
        {"mp_status", L::parameter, false,
         "ok | too_few (mp_n_bulk < min_fit_size: every other mp_* field NaN); a code in the store, a name "
         "in CSVs",
         "esd, mp fit"},
        {"tw_esd_bound", L::parameter, false, "Johnstone soft edge mu + s F_TW1^-1(1 - p), p = 0.005",
         "mp_bulk_std, N, M"},
        {"tw_num_spikes", L::parameter, false, "#{lambda_i > tw_esd_bound}", "esd, tw_esd_bound"},
        {"pl_alpha", L::parameter, false,
         "power-law MLE 1 + n / sum ln(lambda_i / x_min) over the tail, x_min KS-optimal (powerlaw 1.5)",
         "esd"},
        {"pl_esd_xmin", L::parameter, false, "KS-optimal x_min of the power-law fit", "esd"},
        {"pl_ks", L::parameter, false, "KS distance of the power-law fit at x_min", "esd"},
        {"pl_concentration", L::parameter, false, "#{lambda_i >= pl_esd_xmin} / M", "esd, power-law fit"},
        {"pl_presence", L::parameter, false,
         "(lambda_max - x_min) / (lambda_max - lambda_min); NaN if the width is 0", "esd, power-law fit"},
        {"pl_alpha_weighted", L::parameter, false, "pl_alpha * log10(esd_max)", "esd, power-law fit"},
        {"pl_alpha_norm", L::parameter, false, "sum lambda_i^pl_alpha; NaN when not finite and positive",
         "esd, power-law fit"},
        {"pl_n_tail", L::parameter, false, "#{lambda_i >= pl_esd_xmin} (0 when no fit is possible)",
         "esd, power-law fit"},
        {"pl_status", L::parameter, false,
         "ok | too_few (pl_n_tail < min_fit_size: the fit's values are kept, its diagnostics NaN); code in "
         "the store",
         "esd, power-law fit"},
        {"pl_alpha_xmin2", L::parameter, false,
         "power-law alpha at the runner-up x_min: least KS distance among tails >= min_fit_size holding at "
         "most "
         "half or at least twice pl_n_tail",
         "esd, power-law fit"},
        {"pl_n_tail_xmin2", L::parameter, false, "#{lambda_i >= runner-up x_min} (NaN when there is none)",
         "esd, power-law fit"},
        {"pl_ks_gap", L::parameter, false,
         "KS distance at the runner-up x_min minus at the optimal one (>= 0)", "esd, power-law fit"},
        {"pl_alpha_ci_low", L::parameter, false,
         "2.5th percentile of pl_alpha over --alpha-ci bootstrap resamples of the ESD (x_min re-searched); "
         "NaN "
         "when off or the fit is too_few",
         "esd, power-law fit", false},
        {"pl_alpha_ci_high", L::parameter, false, "97.5th percentile of the same bootstrap alphas",
         "esd, power-law fit", false},
        {"tpl_alpha", L::parameter, false,
         "truncated power law p ~ lambda^-alpha e^(-Lambda lambda): alpha (MLE, powerlaw 1.5)", "esd"},
        {"tpl_lambda", L::parameter, false, "truncated power law: Lambda", "esd"},
        {"tpl_esd_xmin", L::parameter, false, "x_min of the truncated power-law fit", "esd"},
        {"tpl_ks", L::parameter, false, "KS distance of the truncated power-law fit", "esd"},
        {"tpl_concentration", L::parameter, false, "#{lambda_i >= tpl_esd_xmin} / M", "esd, tpl fit"},
        {"tpl_presence", L::parameter, false, "(lambda_max - x_min) / (lambda_max - lambda_min)",
         "esd, tpl fit"},
        {"tpl_scale", L::parameter, false, "lambda_max * tpl_lambda", "esd, tpl fit"},
        {"tpl_alpha_norm", L::parameter, false, "sum lambda_i^tpl_alpha", "esd, tpl fit"},
        {"tpl_n_tail", L::parameter, false, "#{lambda_i >= tpl_esd_xmin}", "esd, tpl fit"},
        {"tpl_status", L::parameter, false,
         "ok | too_few | no_convergence | at_bound:alpha (alpha <= 1 + 1e-4) | at_bound:lambda (Lambda <= "
         "1e-4)",
         "esd, tpl fit"},
        {"expon_lambda", L::parameter, false, "exponential tail: Lambda = 1 / (mean of the tail - x_min)",
         "esd"},
        {"expon_esd_xmin", L::parameter, false, "x_min of the exponential fit", "esd"},
        {"expon_ks", L::parameter, false, "KS distance of the exponential fit", "esd"},
        {"expon_concentration", L::parameter, false, "#{lambda_i >= expon_esd_xmin} / M",
         "esd, exponential fit"},
        {"expon_presence", L::parameter, false, "(lambda_max - x_min) / (lambda_max - lambda_min)",
         "esd, exponential fit"},
        {"expon_scale", L::parameter, false, "lambda_max * expon_lambda", "esd, exponential fit"},
        {"expon_n_tail", L::parameter, false, "#{lambda_i >= expon_esd_xmin}", "esd, exponential fit"},
        {"expon_status", L::parameter, false,
         "ok | too_few | no_convergence | at_bound:lambda (Lambda <= 1e-4)", "esd, exponential fit"},
        {"pl_p_value", L::parameter, false, "semi-parametric bootstrap Pr(D* > D); NaN with < 50 tail points",
         "esd, power-law fit", false},
        {"tpl_p_value", L::parameter, false, "semi-parametric bootstrap Pr(D* > D)", "esd, tpl fit", false},
        {"expon_p_value", L::parameter, false, "semi-parametric bootstrap Pr(D* > D)", "esd, exponential fit",
         false},
        {"w1_rand_distance", L::parameter, false, "W1(esd, esd_rand) / mean(esd); 0 if the mean <= 0",
         "esd, esd_rand"},
        {"esd_rand_max_null_std", L::parameter, false, "std (ddof 1) of esd_rand_max over --null-draws draws",
         "esd_rand", false},
        {"esd_rand_min_null_std", L::parameter, false, "std (ddof 1) of esd_rand_min over --null-draws draws",
         "esd_rand", false},
        {"max_weights_rand_sval_null_std", L::parameter, false,
         "std (ddof 1) of max_weights_rand_sval over --null-draws draws", "esd_rand", false},
        {"min_weights_rand_sval_null_std", L::parameter, false,
         "std (ddof 1) of min_weights_rand_sval over --null-draws draws", "esd_rand", false},
        {"w1_rand_distance_null_std", L::parameter, false,
         "std (ddof 1) of w1_rand_distance over --null-draws draws", "esd, esd_rand", false},
        {"log_norm", L::in_model, false, "mean of log10(frob_norm^2) over measurable matrices", "frob_norm"},
        {"log_spectral_norm", L::in_model, false, "mean of log10(l2_norm^2)", "l2_norm"},
        {"param_norm", L::in_model, false, "sum of frob_norm^2 (NaN propagates)", "frob_norm"},
        {"log_prod_frob_norm", L::in_model, false, "sum of log10(frob_norm)", "frob_norm"},
        {"log_prod_spectral_norm", L::in_model, false, "sum of log10(l2_norm)", "l2_norm"},
        {"model_pl_alpha_norm", L::in_model, false, "mean of log10(pl_alpha_norm)", "pl_alpha_norm"},
        {"model_tpl_alpha_norm", L::in_model, false, "mean of log10(tpl_alpha_norm)", "tpl_alpha_norm"},
        {"l_overlap", L::cross_model, true, "|U1^T U2| (entry-wise absolute value)", "weights_lsvs of both"},
        {"r_overlap", L::cross_model, true, "|V1^T V2|", "weights_rsvs of both"},
        {"l_agreement", L::cross_model, true, "diagonal of l_overlap", "l_overlap"},
        {"r_agreement", L::cross_model, true, "diagonal of r_overlap", "r_overlap"},
        {"max_l_agreement", L::cross_model, true, "row-wise max of l_overlap", "l_overlap"},
        {"max_r_agreement", L::cross_model, true, "row-wise max of r_overlap", "r_overlap"},
        {"avg_l_agreement", L::cross_model, false, "mean of l_agreement", "l_agreement"},
        {"avg_r_agreement", L::cross_model, false, "mean of r_agreement", "r_agreement"},
        {"avg_max_l_agreement", L::cross_model, false, "mean of max_l_agreement", "max_l_agreement"},
        {"avg_max_r_agreement", L::cross_model, false, "mean of max_r_agreement", "max_r_agreement"},
    };
    return fields;
}

std::string_view level_name(Level l) { return name_of(kLevelNames, l); }

const FieldInfo* find_field(std::string_view name) {
    for (const auto& f : field_catalog())
        if (f.name == name) return &f;
    return nullptr;
}

std::vector<std::string> resolve_metrics(std::string_view spec) {
    std::vector<std::string> out;
    const bool all = spec == "all";
    if (all || spec == "default" || spec.empty()) {
        for (const auto& f : field_catalog())
            if (f.level == Level::parameter && !f.is_vector && (all || f.in_default))
                out.emplace_back(f.name);
        return out;
    }
    for (const auto& name : split_list(std::string(spec))) {
        const auto* f = find_field(name);
        if (!f) throw InputError(fmt::format("--metrics: unknown field '{}' (see `diffract metrics`)", name));
        if (f->level == Level::cross_model || f->is_vector)
            throw InputError(
                fmt::format("--metrics: '{}' is a {} {} field, not a per-matrix or per-model scalar", name,
                            level_name(f->level), f->is_vector ? "vector" : "scalar"));
        if (std::find(out.begin(), out.end(), name) == out.end()) out.emplace_back(name);
    }
    return out;
}

std::string_view precision_name(double bits) {
    if (bits == 32) return name_of(kPrecisionNames, Precision::f32);
    if (bits == 64) return name_of(kPrecisionNames, Precision::f64);
    return "nan";
}

std::string KernelConfig::key() const {
    const std::string_view route_name = name_of(linalg::kSvdRouteNames, route);
    return fmt::format(
        "{};precision={};route={};rand_seed={};hard_rank_rtol={};tw_p={};boot={};boot_seed={};min_fit={};"
        "alpha_ci={};alpha_ci_seed={}{}",
        kKernelConfigVersion,
        // f32's Gram route changed (f32 product under kF32GramGuard): "f32g" keeps older f32 results out.
        // v2: the permutation null of a tall matrix runs in f32 (linalg::null_in_f32).
        // v3: a too_few tail fit keeps its alpha, lambda and KS (they were NaN).
        // "f32n": the f32 tier's null takes the values' route (f32 product, f64 eigenvalues).
        precision == Precision::f32 ? "f32n" : "f64", route_name, rand_seed, hard_rank_rtol, tw_p,
        p_value_bootstraps, p_value_seed, min_fit_size, alpha_ci_draws, alpha_ci_seed,
        null_draws == 1 ? std::string() : fmt::format(";null_draws={}", null_draws));
}

void KernelConfig::check() const {
    if (min_fit_size < 0)
        throw InputError(fmt::format("--min-fit-size: expected an integer >= 0, found {}", min_fit_size));
    if (null_draws < 1 || null_draws > 10000)
        throw InputError(
            fmt::format("--null-draws: expected a number of draws in [1, 10000], found {}", null_draws));
    // Bounded as --null-draws: each draw is a whole power-law refit per matrix, and the bootstrap of
    // one matrix is not interrupted (10000 draws: seconds on a large matrix, not hours).
    if (alpha_ci_draws < 0 || alpha_ci_draws > kMaxAlphaCiDraws)
        throw InputError(fmt::format("--alpha-ci: expected a number of draws in [0, {}] (0: off), found {}",
                                     kMaxAlphaCiDraws, alpha_ci_draws));
    if (p_value_bootstraps < 1 || p_value_bootstraps > 100000)
        throw InputError(fmt::format("--p-value-draws: expected a number of draws in [1, 100000], found {}",
                                     p_value_bootstraps));
}

}  // namespace diffract::analysis
