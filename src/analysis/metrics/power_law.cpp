// Tail fits of an ESD (power law, truncated power law, exponential) as the `powerlaw` package 1.5 computes
// them for `Fit(esd, xmin_distribution=D, discrete=False)`, plus the bootstrap p-value.
//
// Why this shape: the reference reports powerlaw's numbers, so we port its algorithm rather than a
// textbook one: the same candidate x_min set, its KS statistic (evaluated at the distinct tail values with
// the left-continuous empirical CDF), and scipy's Nelder-Mead (fmin) step for step where powerlaw
// optimises numerically (exponential Lambda, truncated power law). Speed comes from sufficient statistics:
// every log-likelihood here depends on the tail only through (n, sum ln x, sum x), which are suffix sums,
// so an optimiser step is O(1) and the x_min scan costs O(candidates x KS length) with early exit.
// The numeric tools live beside it: nelder_mead_impl.hpp (scipy's fmin), incomplete_gamma.cpp (Gamma(a, z)).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "analysis/metrics/nelder_mead_impl.hpp"
#include "analysis/metrics/tail_sampling_impl.hpp"
#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/core/random.hpp"

namespace diffract::analysis {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// powerlaw's stand-in likelihood for impossible points: 10 ** sys.float_info.min_10_exp.
constexpr double kTinyLikelihood = 1e-307;

using nelder_mead_detail::nelder_mead;
using nelder_mead_detail::Vec;

// ----------------------------------------------------------------------------------------------------
// The data as powerlaw sees it: sorted positive values, their distinct values u_j, the number f_j of values
// below u_j, and suffix sums for the tail statistics.

struct Spectrum {
    std::vector<double> x;                          // sorted, > 0
    std::vector<double> u;                          // distinct values, ascending
    std::vector<double> log_u;                      // ln u_j
    std::vector<std::size_t> first;                 // first[j] = #{x < u_j}
    std::vector<long double> suffix_log, suffix_x;  // over x[i:], size n + 1
    bool valid = false;                             // >= 2 distinct values and no NaN/inf

    std::size_t n() const { return x.size(); }
    std::size_t candidates() const { return u.size() - 1; }  // the largest value is never a candidate
};

Spectrum prepare(std::span<const double> esd) {
    Spectrum s;
    for (double v : esd) {
        if (!std::isfinite(v)) return s;  // NaN / inf: refuse (see header)
        if (v > 0.0) s.x.push_back(v);
    }
    if (!std::is_sorted(s.x.begin(), s.x.end())) std::sort(s.x.begin(), s.x.end());
    const std::size_t n = s.x.size();
    for (std::size_t i = 0; i < n; ++i) {
        if (i == 0 || s.x[i] != s.x[i - 1]) {
            s.u.push_back(s.x[i]);
            s.log_u.push_back(std::log(s.x[i]));
            s.first.push_back(i);
        }
    }
    if (s.u.size() < 2) return s;
    s.suffix_log.assign(n + 1, 0.0L);
    s.suffix_x.assign(n + 1, 0.0L);
    for (std::size_t i = n; i-- > 0;) {
        s.suffix_log[i] = s.suffix_log[i + 1] + static_cast<long double>(std::log(s.x[i]));
        s.suffix_x[i] = s.suffix_x[i + 1] + static_cast<long double>(s.x[i]);
    }
    s.valid = true;
    return s;
}

// Tail statistics at candidate j.
struct TailStats {
    std::size_t begin = 0;  // index of the first tail value in x
    double n = 0.0;         // tail size
    double xmin = 0.0;
    double sum_log_ratio = 0.0;  // sum ln(x / xmin)
    double sum_x = 0.0;          // sum x
    double sum_log = 0.0;        // sum ln x
    double mean = 0.0;
    double xmax = 0.0;
};

TailStats tail_stats(const Spectrum& s, std::size_t j) {
    TailStats t;
    t.begin = s.first[j];
    const std::size_t nt = s.n() - t.begin;
    t.n = static_cast<double>(nt);
    t.xmin = s.u[j];
    t.xmax = s.x.back();
    if (nt <= 64) {
        // Small tails: sum the ratios directly (the suffix-sum difference would cancel).
        double acc = 0.0;
        for (std::size_t i = t.begin; i < s.n(); ++i) acc += std::log(s.x[i] / t.xmin);
        t.sum_log_ratio = acc;
    } else {
        t.sum_log_ratio =
            static_cast<double>(s.suffix_log[t.begin] - static_cast<long double>(nt) * s.log_u[j]);
    }
    t.sum_x = static_cast<double>(s.suffix_x[t.begin]);
    t.sum_log = static_cast<double>(s.suffix_log[t.begin]);
    t.mean = t.sum_x / t.n;
    return t;
}

// powerlaw's empirical CDF at the distinct tail values. During the x_min search it is the whole data's CDF
// renormalised ((f_l/n - f_j/n) / (1 - f_j/n)); for the final fit it is the tail's own (c_l / n_tail). Both
// are the same number up to rounding; we reproduce each where powerlaw uses it.
struct EmpiricalCdf {
    const Spectrum& s;
    std::size_t j;
    bool search;
    double n_all, dropped, denom, n_tail;
    EmpiricalCdf(const Spectrum& sp, std::size_t jj, bool in_search)
        : s(sp), j(jj), search(in_search), n_all(static_cast<double>(sp.n())) {
        dropped = static_cast<double>(s.first[j]) / n_all;
        denom = 1.0 - dropped;
        n_tail = static_cast<double>(s.n() - s.first[j]);
    }
    double operator()(std::size_t l) const {
        if (search) return (static_cast<double>(s.first[l]) / n_all - dropped) / denom;
        return static_cast<double>(s.first[l] - s.first[j]) / n_tail;
    }
};

// D = max_l |T(u_l) - A(u_l)| over l >= j; stops early once D >= stop (the caller then discards it).
// Where the previous candidate's KS distance peaked: the peak moves little between neighbouring x_min, so
// checking it first usually proves a candidate hopeless (D >= best) after one evaluation.
struct KsHint {
    std::size_t peak = static_cast<std::size_t>(-1);
};

// D = max_l |T(u_l) - A(u_l)| over l >= j; stops early once D >= stop (the caller then discards it, so the
// early value is only a lower bound).
template <class ModelCdf>
double ks_distance(const Spectrum& s, std::size_t j, bool search, ModelCdf&& model, double stop = kInf,
                   KsHint* hint = nullptr) {
    const EmpiricalCdf ecdf(s, j, search);
    if (hint && hint->peak != static_cast<std::size_t>(-1) && hint->peak >= j && hint->peak < s.u.size()) {
        const double diff = std::fabs(model(hint->peak) - ecdf(hint->peak));
        if (diff >= stop) return diff;
    }
    double d = 0.0;
    std::size_t peak = j;
    for (std::size_t l = j; l < s.u.size(); ++l) {
        const double diff = std::fabs(model(l) - ecdf(l));
        if (std::isnan(diff)) return kNaN;
        if (diff > d) {
            d = diff;
            peak = l;
            if (d >= stop) break;
        }
    }
    if (hint) hint->peak = peak;
    return d;
}

double power_law_alpha(const TailStats& t) { return 1.0 + t.n / t.sum_log_ratio; }

double power_law_ks(const Spectrum& s, std::size_t j, double alpha, bool search, double stop = kInf,
                    KsHint* hint = nullptr) {
    const double e = 1.0 - alpha;
    const double lj = s.log_u[j];
    return ks_distance(
        s, j, search, [&](std::size_t l) { return 1.0 - std::exp(e * (s.log_u[l] - lj)); }, stop, hint);
}

// Index of the x_min chosen by the power-law KS search.
std::size_t power_law_xmin_index(const Spectrum& s) {
    double best = kInf;
    std::size_t best_j = 0;
    KsHint hint;
    for (std::size_t j = 0; j < s.candidates(); ++j) {
        const double alpha = power_law_alpha(tail_stats(s, j));
        const double d = power_law_ks(s, j, alpha, true, best, &hint);
        if (d < best) {
            best = d;
            best_j = j;
        }
    }
    return best_j;
}

// ---- exponential: powerlaw's Exponential.loglikelihoods, through (n, sum x).
double exponential_nll(const TailStats& t, double lambda) {
    if (!(lambda > 0.0)) return -(t.n * std::log(kTinyLikelihood));
    return -(t.n * std::log(lambda) + lambda * (t.n * t.xmin - t.sum_x));
}

double exponential_lambda(const TailStats& t, bool* converged = nullptr) {
    const Vec<1> x0 = {1.0 / t.mean};
    return nelder_mead<1>([&](const Vec<1>& p) { return exponential_nll(t, p[0]); }, x0, converged)[0];
}

double exponential_ks(const Spectrum& s, std::size_t j, double lambda, bool search, double stop = kInf,
                      KsHint* hint = nullptr) {
    if (!(lambda > 0.0))
        return ks_distance(
            s, j, search, [](std::size_t) { return kTinyLikelihood; }, stop);
    const double cdf_xmin = 1.0 - std::exp(-lambda * s.u[j]);
    if (cdf_xmin == 1.0)
        return ks_distance(
            s, j, search, [](std::size_t) { return 1.0; }, stop);
    const double norm = 1.0 - cdf_xmin;
    return ks_distance(
        s, j, search, [&](std::size_t l) { return ((1.0 - std::exp(-lambda * s.u[l])) - cdf_xmin) / norm; },
        stop, hint);
}

// ---- truncated power law: powerlaw's pdf x^-alpha e^(-Lambda x) Lambda^(1-alpha) / Gamma(1-alpha, Lambda
// xmin).
double tpl_nll(const Spectrum& s, const TailStats& t, double alpha, double lambda) {
    if (!(lambda > 0.0 && alpha > 1.0)) return -(t.n * std::log(kTinyLikelihood));
    const double a = 1.0 - alpha;
    const double log_gamma = log_upper_incomplete_gamma(a, lambda * t.xmin);
    const double pw = std::pow(lambda, a);
    const double gamma = std::exp(log_gamma);
    const double c = pw / gamma;  // as powerlaw forms it (float(gammainc) may overflow to inf or 0)
    const bool tame =
        std::isfinite(c) && c > 0.0 && std::isfinite(pw) && pw > 0.0 && std::isfinite(gamma) && gamma > 0.0;
    if (tame) {
        // Fast path when no per-point factor can overflow or underflow: all logs within (-700, 700).
        const double lc = std::log(c);
        const double lo = -alpha * std::log(t.xmax), hi = -alpha * std::log(t.xmin);
        const double emax = lambda * t.xmax;
        auto ok = [](double v) { return v > -700.0 && v < 700.0; };
        if (ok(lc) && ok(lo) && ok(hi) && emax < 700.0 && ok(lo - emax + lc) && ok(hi - lambda * t.xmin + lc))
            return -(-alpha * t.sum_log - lambda * t.sum_x + t.n * lc);
    }
    // Per point, exactly as numpy evaluates it (x**-alpha * exp(-Lambda x) * C, zeros replaced by 1e-307).
    double ll = 0.0;
    for (std::size_t i = t.begin; i < s.n(); ++i) {
        double p = std::pow(s.x[i], -alpha) * std::exp(-lambda * s.x[i]) * c;
        if (p == 0.0) p = kTinyLikelihood;
        ll += std::log(p);
    }
    return -ll;
}

Vec<2> tpl_parameters(const Spectrum& s, const TailStats& t, bool* converged) {
    const Vec<2> x0 = {1.0 + t.n / t.sum_log_ratio, 1.0 / t.mean};
    return nelder_mead<2>([&](const Vec<2>& p) { return tpl_nll(s, t, p[0], p[1]); }, x0, converged);
}

double tpl_ks(const Spectrum& s, std::size_t j, double alpha, double lambda) {
    if (!(lambda > 0.0 && alpha > 1.0))
        return ks_distance(s, j, false, [](std::size_t) { return kTinyLikelihood; });
    const double a = 1.0 - alpha;
    const double pw = std::pow(lambda, a);
    const double log_lambda = std::log(lambda);
    // base(x) = 1 - Gamma(a, Lambda x) / Lambda^a, as powerlaw's _cdf_base_function.
    auto base = [&](double x) {
        const double lg = log_upper_incomplete_gamma(a, lambda * x);
        const double g = std::exp(lg);
        const double ratio = (std::isfinite(g) && g > 0.0 && std::isfinite(pw) && pw > 0.0)
                                 ? g / pw
                                 : std::exp(lg - a * log_lambda);
        return 1.0 - ratio;
    };
    const double cdf_xmin = base(s.u[j]);
    if (cdf_xmin == 1.0) return ks_distance(s, j, false, [](std::size_t) { return 1.0; });
    const double norm = 1.0 - cdf_xmin;
    return ks_distance(s, j, false, [&](std::size_t l) { return (base(s.u[l]) - cdf_xmin) / norm; });
}

}  // namespace

TailFit fit_power_law(std::span<const double> esd) {
    TailFit fit;
    const Spectrum s = prepare(esd);
    if (!s.valid) return fit;
    const std::size_t j = power_law_xmin_index(s);
    const TailStats t = tail_stats(s, j);
    fit.alpha = power_law_alpha(t);
    fit.xmin = t.xmin;
    fit.ks = power_law_ks(s, j, fit.alpha, false);
    fit.n_tail = s.n() - t.begin;
    return fit;
}

FitStatus tail_fit_status(const TailFit& f, bool has_lambda, bool has_alpha, int min_fit_size) {
    if (f.n_tail == 0 || f.n_tail < static_cast<std::size_t>(std::max(min_fit_size, 0)))
        return FitStatus::too_few;
    if (!f.converged) return FitStatus::no_convergence;
    if (has_alpha && has_lambda && !(f.alpha > 1.0 + kFitParamTolerance)) return FitStatus::at_bound_alpha;
    if (has_lambda && !(f.lambda > kFitParamTolerance)) return FitStatus::at_bound_lambda;
    return FitStatus::ok;
}

XminRunnerUp power_law_runner_up(std::span<const double> esd, std::size_t min_tail) {
    XminRunnerUp out;
    const Spectrum s = prepare(esd);
    if (!s.valid) return out;
    const std::size_t best_j = power_law_xmin_index(s);
    const double best_d = power_law_ks(s, best_j, power_law_alpha(tail_stats(s, best_j)), true);
    const std::size_t n_best = s.n() - s.first[best_j];
    double second = kInf;
    std::size_t second_j = 0;
    bool found = false;
    KsHint hint;
    for (std::size_t j = 0; j < s.candidates(); ++j) {
        const std::size_t nt = s.n() - s.first[j];
        if (nt < min_tail || (2 * nt > n_best && nt < 2 * n_best)) continue;
        const double d = power_law_ks(s, j, power_law_alpha(tail_stats(s, j)), true, second, &hint);
        if (d < second) second = d, second_j = j, found = true;
    }
    if (!found) return out;
    const TailStats t = tail_stats(s, second_j);
    out.alpha = power_law_alpha(t);
    out.xmin = t.xmin;
    out.ks_gap = second - best_d;
    out.n_tail = s.n() - t.begin;
    return out;
}

TailFit fit_truncated_power_law(std::span<const double> esd) {
    TailFit fit;
    const Spectrum s = prepare(esd);
    if (!s.valid) return fit;
    const std::size_t j = power_law_xmin_index(s);
    const TailStats t = tail_stats(s, j);
    const Vec<2> p = tpl_parameters(s, t, &fit.converged);
    fit.alpha = p[0];
    fit.lambda = p[1];
    fit.xmin = t.xmin;
    fit.ks = tpl_ks(s, j, p[0], p[1]);
    fit.n_tail = s.n() - t.begin;
    return fit;
}

TailFit fit_exponential(std::span<const double> esd) {
    TailFit fit;
    const Spectrum s = prepare(esd);
    if (!s.valid) return fit;
    // powerlaw's find_xmin: argmin of D over the candidates whose fit is in range (Lambda > 0); over all of
    // them when none is (or all are). A NaN D wins as in numpy.argmin.
    double best_in = kInf, best_all = kInf;
    std::size_t j_in = 0, j_all = 0;
    bool any_in = false, any_out = false, nan_in = false, nan_all = false;
    KsHint hint;
    for (std::size_t j = 0; j < s.candidates(); ++j) {
        const TailStats t = tail_stats(s, j);
        const double lambda = exponential_lambda(t);
        const bool in_range = lambda > 0.0;
        (in_range ? any_in : any_out) = true;
        // Early exit is only safe against the tighter of the two running minima we may end up using.
        const double stop = std::max(best_in, best_all);
        const double d = exponential_ks(s, j, lambda, true, stop, &hint);
        if (std::isnan(d)) {
            if (!nan_all) nan_all = true, j_all = j, best_all = -kInf;
            if (in_range && !nan_in) nan_in = true, j_in = j, best_in = -kInf;
            continue;
        }
        if (!nan_all && d < best_all) best_all = d, j_all = j;
        if (in_range && !nan_in && d < best_in) best_in = d, j_in = j;
    }
    const std::size_t j = (any_in && any_out) ? j_in : j_all;
    const TailStats t = tail_stats(s, j);
    fit.lambda = exponential_lambda(t, &fit.converged);
    fit.xmin = t.xmin;
    fit.ks = exponential_ks(s, j, fit.lambda, false);
    fit.n_tail = s.n() - t.begin;
    return fit;
}

AlphaInterval power_law_alpha_ci(std::span<const double> esd, int draws, std::uint64_t seed, double level,
                                 const DrawTick& on_draw) {
    AlphaInterval out;
    if (draws <= 0 || !(level > 0.0 && level < 1.0)) return out;
    const Spectrum s = prepare(esd);
    if (!s.valid) return out;
    Xoshiro256Rng rng(seed);
    std::vector<double> sample(s.n()), alphas;
    alphas.reserve(static_cast<std::size_t>(draws));
    for (int b = 0; b < draws; ++b) {
        for (auto& v : sample) v = s.x[rng.index(s.n())];
        std::sort(sample.begin(), sample.end());
        const double a = fit_power_law(sample).alpha;  // NaN when the resample has < 2 distinct values
        if (std::isfinite(a)) alphas.push_back(a);
        if (on_draw) on_draw();
    }
    if (alphas.empty()) return out;
    std::sort(alphas.begin(), alphas.end());
    auto percentile = [&](double q) {  // numpy.percentile, method 'linear'
        const double pos = q * static_cast<double>(alphas.size() - 1);
        const auto lo = static_cast<std::size_t>(std::floor(pos));
        const std::size_t hi = std::min(lo + 1, alphas.size() - 1);
        return alphas[lo] + (pos - static_cast<double>(lo)) * (alphas[hi] - alphas[lo]);
    };
    out.low = percentile((1.0 - level) / 2.0);
    out.high = percentile((1.0 + level) / 2.0);
    return out;
}

double tail_p_value(const TailFit& fit, std::span<const double> esd, int kind, int n_boot, std::uint64_t seed,
                    const DrawTick& on_draw) {
    if (n_boot <= 0 || fit.n_tail < 50 || !std::isfinite(fit.ks) || !std::isfinite(fit.xmin)) return kNaN;
    const bool pl = kind == kTailPowerLaw, tpl = kind == kTailTruncatedPowerLaw,
               ex = kind == kTailExponential;
    if (!pl && !tpl && !ex) return kNaN;
    if ((pl || tpl) && !(fit.alpha > 1.0)) return kNaN;
    if ((tpl || ex) && !(fit.lambda > 0.0)) return kNaN;
    const Spectrum s = prepare(esd);
    if (!s.valid) return kNaN;
    std::vector<double> body;
    for (double v : s.x)
        if (v < fit.xmin) body.push_back(v);
    const double p_tail = static_cast<double>(s.n() - body.size()) / static_cast<double>(s.n());

    Xoshiro256Rng rng(seed);
    auto draw_tail = [&]() {
        if (pl) return fit.xmin * std::pow(1.0 - rng.uniform(), -1.0 / (fit.alpha - 1.0));
        if (ex) return fit.xmin - std::log(1.0 - rng.uniform()) / fit.lambda;
        return draw_truncated_power_law(rng, fit.xmin, fit.alpha, fit.lambda);
    };
    std::vector<double> synth(s.n());
    int exceed = 0;
    for (int b = 0; b < n_boot; ++b) {
        for (auto& v : synth)
            v = (body.empty() || rng.uniform() < p_tail) ? draw_tail() : body[rng.index(body.size())];
        std::sort(synth.begin(), synth.end());
        const TailFit f = pl    ? fit_power_law(synth)
                          : tpl ? fit_truncated_power_law(synth)
                                : fit_exponential(synth);
        if (f.ks > fit.ks) ++exceed;
        if (on_draw) on_draw();
    }
    return static_cast<double>(exceed) / n_boot;
}

}  // namespace diffract::analysis
