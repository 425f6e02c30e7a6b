// Spectral fits over an eigenvalue spectrum (ESD): pure numeric functions, no I/O.
//
// Field names and formulas follow /shared/reference/metrics.md (the `diffract-core` catalog). The tail
// fits reproduce the `powerlaw` package 1.5 (`Fit(esd, xmin_distribution=D, discrete=False)`), which is
// what the reference calls, including its numerical quirks, so that results agree to ~1e-10:
//
//  * Candidate x_min: every distinct positive value of the ESD except the largest (at least two tail
//    points). Values <= 0 are dropped first (powerlaw drops them when the data contain an exact 0; an
//    ESD has no negative values, so this is the same data).
//  * Power law: alpha = 1 + n / sum ln(x / x_min) (closed form); the KS distance is powerlaw's:
//    D = max over the *distinct* tail values u of |F_model(u) - #(tail < u) / n_tail| (the empirical CDF
//    just below each jump, not the textbook two-sided statistic). x_min = first argmin of D.
//  * Exponential: x_min is chosen by the exponential's own KS search (xmin_distribution='exponential');
//    Lambda at each candidate is powerlaw's: scipy.optimize.fmin (Nelder-Mead, xtol = ftol = 1e-4 absolute,
//    start 1 / mean(tail)) on the log-likelihood, ported step for step. It approximates the closed-form
//    MLE 1 / (mean(tail) - x_min) of metrics.md within fmin's tolerance (typically < 1e-4 relative);
//    we keep fmin's value because that is the number the reference reports.
//  * Truncated power law: x_min of the power-law search (metrics.md), then (alpha, Lambda) by the same
//    Nelder-Mead port from powerlaw's start (alpha_PL, 1 / mean(tail)), with powerlaw's normalisation
//    Lambda^(1-alpha) / Gamma(1-alpha, Lambda x_min) (upper incomplete gamma, see
//    log_upper_incomplete_gamma) and its out-of-range penalty (likelihood 1e-307 when alpha <= 1 or
//    Lambda <= 0).
//
// Degenerate inputs never throw:
//  * fewer than 2 distinct positive values (empty, all zero, constant): every TailFit field is NaN and
//    n_tail = 0 (powerlaw prints "Less than 2 unique data values" and returns NaN for everything);
//  * any NaN or infinite value in the ESD: every TailFit field NaN, n_tail = 0 (powerlaw's behaviour
//    there is an artefact of NaN sorting; we refuse to fit instead);
//  * MP / TW / W1 functions return NaN for NaN or out-of-domain parameters, as documented per function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>

#include "diffract/analysis/fit_status.hpp"
#include "diffract/core/numbers.hpp"

namespace diffract::analysis {

// One tail fit. `alpha` is NaN for the exponential, `lambda` NaN for the power law. `ks` is the
// powerlaw-style KS distance at the chosen x_min; `n_tail` = #{x >= xmin}. `p_value` is not filled by the
// fits (see tail_p_value).
struct TailFit {
    double alpha = kNaN;
    double lambda = kNaN;
    double xmin = kNaN;
    double ks = kNaN;
    double p_value = kNaN;
    std::size_t n_tail = 0;
    // False when the Nelder-Mead search (exponential Lambda, truncated power law) stopped at its
    // evaluation or iteration limit (200 per parameter) before its tolerances held; true otherwise.
    bool converged = true;
};

// pl_alpha, pl_esd_xmin, pl_ks. O(n log n) set-up plus a KS scan over the candidates that stops a candidate
// as soon as its running D reaches the best D so far (exact: argmin keeps the first minimum).
TailFit fit_power_law(std::span<const double> esd);

// tpl_alpha, tpl_lambda, tpl_esd_xmin (= pl_esd_xmin), tpl_ks.
TailFit fit_truncated_power_law(std::span<const double> esd);

// expon_lambda, expon_esd_xmin, expon_ks (x_min from the exponential's own KS search).
TailFit fit_exponential(std::span<const double> esd);

// The optimiser's absolute tolerance on a parameter (scipy fmin's xtol, as powerlaw calls it): a fitted
// alpha <= 1 + kFitParamTolerance or Lambda <= kFitParamTolerance cannot be told from its bound.
inline constexpr double kFitParamTolerance = 1e-4;

// The status of a tail fit (fit_status.hpp), first rule that applies: too_few when n_tail is 0 (no fit
// possible) or below min_fit_size; no_convergence when the optimiser did not converge; at_bound:alpha
// when a fitted alpha (has_alpha with has_lambda: the truncated power law; the power law's alpha is
// closed form) is <= 1 + kFitParamTolerance or NaN; at_bound:lambda when a fitted Lambda (has_lambda)
// is <= kFitParamTolerance or NaN; else ok.
FitStatus tail_fit_status(const TailFit& fit, bool has_lambda, bool has_alpha, int min_fit_size);

// The power-law fit at the runner-up x_min, to show how stable the KS-optimal choice is: among the
// candidates whose tail holds at least `min_tail` points and at most half or at least twice as many as
// the KS-optimal tail (a different region of the ESD, not the optimum's neighbour), the one with the
// smallest KS distance (the search's form of D, first minimum). `ks_gap` = its D minus the optimal D
// (>= 0): a small gap with a different alpha means the data support two exponents almost equally.
// NaN fields (n_tail 0) when the ESD cannot be fitted or no candidate qualifies.
struct XminRunnerUp {
    double alpha = kNaN;
    double xmin = kNaN;
    double ks_gap = kNaN;
    std::size_t n_tail = 0;
};
XminRunnerUp power_law_runner_up(std::span<const double> esd, std::size_t min_tail);

// Bootstrap confidence interval of the power-law alpha: `draws` resamples of the ESD's positive values
// (with replacement, the ESD's size), each refitted with the whole procedure (x_min search included);
// the interval is the (1 - level)/2 and (1 + level)/2 percentiles of the draws' alphas (numpy's linear
// interpolation). Deterministic per seed (xoshiro256** seeded by splitmix64). NaN when draws <= 0, level
// is outside (0, 1), or the ESD cannot be fitted. Costs `draws` power-law fits.
struct AlphaInterval {
    double low = kNaN;
    double high = kNaN;
};
// `on_draw` (when set) is called after each draw: the resampling fields' progress.
using DrawTick = std::function<void()>;
AlphaInterval power_law_alpha_ci(std::span<const double> esd, int draws, std::uint64_t seed,
                                 double level = 0.95, const DrawTick& on_draw = {});

inline constexpr int kTailPowerLaw = 0;
inline constexpr int kTailTruncatedPowerLaw = 1;
inline constexpr int kTailExponential = 2;

// Semi-parametric bootstrap p-value (Clauset, Shalizi & Newman 2009): each of n_boot synthetic data sets
// has the ESD's size; each point is, with probability n_tail / n, drawn from the fitted model above x_min
// (power law, exponential: inverse CDF; truncated power law: the better of two exact rejection samplers,
// tail_sampling_impl.hpp), otherwise drawn uniformly from the ESD values below x_min. Each set is
// refitted with the same procedure (x_min search included) and p = #{D* > D} / n_boot, so p is a
// multiple of 1 / n_boot. Deterministic for a given seed (xoshiro256** seeded by splitmix64, no std::
// distributions). NaN when the fit is NaN, n_tail < 50, n_boot <= 0 or kind is unknown. Costs n_boot
// fits; `on_draw` (when set) is called after each.
double tail_p_value(const TailFit& fit, std::span<const double> esd, int kind, int n_boot, std::uint64_t seed,
                    const DrawTick& on_draw = {});

// ln Gamma(a, z), the upper incomplete gamma function (unregularised, as mpmath.gammainc(a, z)), for real a
// (negative included; a < 1 is what the truncated power law needs) and z > 0. Computed as
// a ln z - z + ln R with R = Gamma(a, z) e^z z^-a: a Lentz continued fraction for z >= 1; for z < 1 the
// series of Gamma(a0, z), a0 = a + round(-a) in (-1/2, 1/2] (Temme's form through the Taylor series of
// 1 / Gamma(1 + x) for a0 < 1/2, so a near a non-positive integer is not cancelled), then the downward
// recurrence R(b - 1) = (z R(b) - 1) / (b - 1). Relative accuracy ~1e-14 (checked against mpmath).
// NaN for z <= 0 or NaN arguments.
double log_upper_incomplete_gamma(double a, double z);

// Marchenko-Pastur fit of metrics.md: s^2 = weights_std^2, l0 = s^2 (1 + 1/sqrt Q)^2; if some esd_rand value
// exceeds l0, s^2 <- (sum of esd_rand values <= l0) / M and l+ = s^2 (1 + 1/sqrt Q)^2, else l+ = l0.
// esd_max = min(l+, max esd), esd_min = s^2 (1 - 1/sqrt Q)^2, bulk_std = s. NaN fields when the ESD is
// empty or has NaN, or Q, M, weights_std are invalid.
struct MarchenkoPasturFit {
    double esd_max = kNaN;
    double esd_min = kNaN;
    double bulk_std = kNaN;
};
MarchenkoPasturFit fit_marchenko_pastur(std::span<const double> esd, std::span<const double> esd_rand,
                                        double weights_std, double aspect_ratio_Q, std::size_t M);

// CDF of the Marchenko-Pastur law with ratio y in (0, 1] and scale sigma (support
// [sigma^2 (1 - sqrt y)^2, sigma^2 (1 + sqrt y)^2], density sqrt((b - x)(x - a)) / (2 pi sigma^2 y x)),
// closed form. 0 below the support, 1 above. NaN for NaN arguments, y outside (0, 1] or sigma <= 0.
double marchenko_pastur_cdf(double x, double ratio, double sigma);

// mp_ks of metrics.md: KS distance between the eigenvalues strictly inside (fit.esd_min, fit.esd_max) and
// the MP CDF (ratio 1 / (Q + 1e-8), scale fit.bulk_std) conditioned on that window. 1 when the window
// holds no eigenvalue or the model mass in it is <= 1e-16; NaN when the fit is NaN.
double mp_ks_distance(std::span<const double> esd, const MarchenkoPasturFit& fit, double Q);

// Tracy-Widom beta = 1 CDF F_1(s) = det(I - K_s) on L^2(0, inf), K_s(x, y) = Ai(s + (x + y)/2) / 2
// (Ferrari-Spohn; Bornemann 2010), by Gauss-Legendre quadrature (96 nodes on [0, 2(14 - s)]). Absolute
// accuracy ~1e-12 for s in [-12, 12]; 0 below s = -40 (the true value is < 1e-300 there), 1 above
// s = 40. NaN for NaN.
double tracy_widom1_cdf(double s);

// Inverse of tracy_widom1_cdf (bracketed secant-bisection to 1e-12). -inf for q <= 0, +inf for q >= 1,
// NaN for NaN. Results are cached per q (thread-safe).
double tracy_widom1_quantile(double q);

// tw_esd_bound of metrics.md (Johnstone's soft edge for the ESD lambda = sigma^2 / N):
// a = sqrt(N-1) + sqrt M, b = 1/sqrt(N-1) + 1/sqrt M, c = bulk_std^2 / N, mu = c a^2, s = c a b^(1/3),
// bound = mu + s F_1^-1(1 - p). NaN for N < 2, M < 1, NaN bulk_std or p outside (0, 1).
double tw_esd_bound(std::size_t N, std::size_t M, double bulk_std, double p);

// First Wasserstein distance between the empirical distributions of a and b (equal weights, lengths may
// differ), as scipy.stats.wasserstein_distance(a, b). NaN when either is empty or holds a NaN.
double wasserstein1(std::span<const double> a, std::span<const double> b);

}  // namespace diffract::analysis
