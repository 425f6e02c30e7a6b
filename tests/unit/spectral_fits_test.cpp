// Closed-form checks of the spectral fits (parity with powerlaw/scipy is tests/python/test_spectral_fits.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "analysis/metrics/tail_sampling_impl.hpp"
#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/random.hpp"

using namespace diffract::analysis;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Exact Pareto "sample": the inverse CDF on the grid u_i = (i + 1/2) / n.
std::vector<double> pareto_grid(std::size_t n, double xmin, double alpha) {
    std::vector<double> x(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double u = (static_cast<double>(i) + 0.5) / static_cast<double>(n);
        x[i] = xmin * std::pow(1.0 - u, -1.0 / (alpha - 1.0));
    }
    return x;
}

std::vector<double> exponential_grid(std::size_t n, double xmin, double lambda) {
    std::vector<double> x(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double u = (static_cast<double>(i) + 0.5) / static_cast<double>(n);
        x[i] = xmin - std::log(1.0 - u) / lambda;
    }
    return x;
}

// Composite Simpson of f on [a, b] with n (even) panels.
template <class F>
double simpson(F&& f, double a, double b, int n) {
    const double h = (b - a) / n;
    double s = f(a) + f(b);
    for (int i = 1; i < n; ++i) s += (i % 2 ? 4.0 : 2.0) * f(a + i * h);
    return s * h / 3.0;
}

// MP CDF by quadrature of the density, with x = a + (b - a)(1 - cos t)/2 removing the edge singularities;
// composite midpoint rule (open: for y ~ 1 the integrand has a boundary layer of width ~1e-9 at t = 0 that
// a closed rule would sample), 20000 panels, error ~1e-9.
double mp_cdf_numeric(double x, double y, double sigma) {
    const double a = sigma * sigma * (1 - std::sqrt(y)) * (1 - std::sqrt(y));
    const double b = sigma * sigma * (1 + std::sqrt(y)) * (1 + std::sqrt(y));
    if (x <= a) return 0.0;
    if (x >= b) return 1.0;
    const double t_max = std::acos(1.0 - 2.0 * (x - a) / (b - a));
    auto integrand = [&](double t) {
        const double lam = a + (b - a) * (1.0 - std::cos(t)) / 2.0;
        const double dens = std::sqrt(std::max(0.0, (b - lam) * (lam - a))) /
                            (2 * std::numbers::pi * sigma * sigma * y * lam);
        return dens * (b - a) * std::sin(t) / 2.0;
    };
    const int n = 20000;
    const double h = t_max / n;
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += integrand((i + 0.5) * h);
    return s * h;
}

}  // namespace

TEST(SpectralFits, PowerLawRecoversParetoAlpha) {
    // Tolerance 2%: the grid sample is exact, the KS search may start the tail a few points above x_min.
    for (double alpha : {1.8, 2.5, 3.5}) {
        const auto x = pareto_grid(3000, 0.01, alpha);
        const TailFit f = fit_power_law(x);
        EXPECT_NEAR(f.alpha, alpha, 0.02 * alpha) << alpha;
        EXPECT_GE(f.xmin, x.front());
        EXPECT_LT(f.ks, 0.02);
        EXPECT_GT(f.n_tail, 1000u);
        EXPECT_TRUE(std::isnan(f.lambda));
    }
}

TEST(SpectralFits, PowerLawIgnoresBulkBelowTail) {
    // A uniform bulk below a Pareto tail: x_min must land at the tail's start (within the bulk's top).
    auto x = pareto_grid(2000, 1.0, 2.5);
    for (int i = 0; i < 2000; ++i) x.push_back(0.001 + 0.9 * i / 2000.0);
    std::sort(x.begin(), x.end());
    const TailFit f = fit_power_law(x);
    EXPECT_NEAR(f.alpha, 2.5, 0.05);
    EXPECT_GE(f.xmin, 0.85);
    EXPECT_LE(f.xmin, 1.2);
}

TEST(SpectralFits, ExponentialRecoversLambda) {
    // Tolerance 2%: fmin's Lambda is within 1e-4 of the MLE 1 / (mean - x_min), itself exact on the grid.
    const auto x = exponential_grid(3000, 0.5, 4.0);
    const TailFit f = fit_exponential(x);
    EXPECT_NEAR(f.lambda, 4.0, 0.08);
    EXPECT_TRUE(std::isnan(f.alpha));
    // At the chosen x_min the closed-form MLE agrees with fmin's vertex to fmin's tolerance.
    double sum = 0.0;
    std::size_t n = 0;
    for (double v : x)
        if (v >= f.xmin) sum += v, ++n;
    EXPECT_NEAR(f.lambda, 1.0 / (sum / n - f.xmin), 1e-3);
    EXPECT_EQ(f.n_tail, n);
}

TEST(SpectralFits, TruncatedPowerLawOnPureParetoHasSmallLambda) {
    // A pure power law: the TPL optimum is Lambda ~ 0 and alpha ~ the power-law alpha (2%).
    const auto x = pareto_grid(3000, 0.01, 2.5);
    const TailFit pl = fit_power_law(x);
    const TailFit tpl = fit_truncated_power_law(x);
    EXPECT_EQ(tpl.xmin, pl.xmin);
    EXPECT_NEAR(tpl.alpha, 2.5, 0.05);
    EXPECT_GE(tpl.lambda, 0.0);
    EXPECT_LT(tpl.lambda * pl.xmin, 0.01);
    EXPECT_LT(tpl.ks, 0.02);
}

TEST(SpectralFits, DegenerateInputsGiveNaN) {
    const std::vector<std::vector<double>> cases = {
        {}, {0.0, 0.0, 0.0}, {1.5}, {2.0, 2.0, 2.0}, {1.0, kNaN, 2.0, 3.0}, {1.0, 2.0, INFINITY}};
    for (const auto& esd : cases) {
        for (const TailFit& f : {fit_power_law(esd), fit_truncated_power_law(esd), fit_exponential(esd)}) {
            EXPECT_TRUE(std::isnan(f.alpha) || f.alpha != f.alpha);
            EXPECT_TRUE(std::isnan(f.xmin));
            EXPECT_TRUE(std::isnan(f.ks));
            EXPECT_EQ(f.n_tail, 0u);
        }
    }
    // Zeros are dropped, as powerlaw does: the fit runs on the positive values.
    const TailFit f = fit_power_law(std::vector<double>{0.0, 0.0, 1.0, 2.0, 4.0});
    EXPECT_EQ(f.xmin, 1.0);
    EXPECT_EQ(f.n_tail, 3u);
}

TEST(SpectralFits, UpperIncompleteGammaKnownValues) {
    // E1(1), e^-1 - E1(1), sqrt(pi) erfc(sqrt z) and its recurrence; 1e-13 relative.
    const double e1 = 0.21938393439552027368;
    EXPECT_NEAR(std::exp(log_upper_incomplete_gamma(0.0, 1.0)), e1, 1e-13 * e1);
    EXPECT_NEAR(std::exp(log_upper_incomplete_gamma(-1.0, 1.0)), std::exp(-1.0) - e1, 1e-13);
    for (double z : {1e-6, 0.01, 0.3, 0.99, 2.0, 30.0}) {
        const double g_half = std::sqrt(std::numbers::pi) * std::erfc(std::sqrt(z));
        const double g_mhalf = 2.0 * std::exp(-z) / std::sqrt(z) - 2.0 * g_half;
        EXPECT_NEAR(log_upper_incomplete_gamma(0.5, z), std::log(g_half), 1e-13) << z;
        EXPECT_NEAR(log_upper_incomplete_gamma(-0.5, z), std::log(g_mhalf), 1e-12) << z;
        EXPECT_NEAR(log_upper_incomplete_gamma(1.0, z), -z, 1e-13) << z;
    }
    // Continuity across a non-positive integer (the TPL's alpha crossing 2): 1e-9 relative.
    for (double z : {0.05, 0.5, 3.0}) {
        const double at = log_upper_incomplete_gamma(-1.0, z);
        EXPECT_NEAR(log_upper_incomplete_gamma(-1.0 + 1e-9, z), at, 1e-8);
        EXPECT_NEAR(log_upper_incomplete_gamma(-1.0 - 1e-9, z), at, 1e-8);
    }
    EXPECT_TRUE(std::isnan(log_upper_incomplete_gamma(-1.0, 0.0)));
}

TEST(SpectralFits, MarchenkoPasturCdfEndpointsAndQuadrature) {
    for (double y : {0.25, 0.9, 1.0 / (1.0 + 1e-8)}) {
        const double sigma = 0.7;
        const double a = sigma * sigma * (1 - std::sqrt(y)) * (1 - std::sqrt(y));
        const double b = sigma * sigma * (1 + std::sqrt(y)) * (1 + std::sqrt(y));
        EXPECT_EQ(marchenko_pastur_cdf(a, y, sigma), 0.0);
        EXPECT_EQ(marchenko_pastur_cdf(b, y, sigma), 1.0);
        EXPECT_EQ(marchenko_pastur_cdf(a - 1.0, y, sigma), 0.0);
        EXPECT_EQ(marchenko_pastur_cdf(b + 1.0, y, sigma), 1.0);
        EXPECT_NEAR(marchenko_pastur_cdf(b * (1 - 1e-15), y, sigma), 1.0, 1e-6);
        // Against quadrature of the density (midpoint rule, ~1e-9): 1e-8.
        const double tol = 1e-8;
        for (int k = 1; k < 10; ++k) {
            const double x = a + (b - a) * k / 10.0;
            EXPECT_NEAR(marchenko_pastur_cdf(x, y, sigma), mp_cdf_numeric(x, y, sigma), tol) << y << " " << x;
        }
    }
    EXPECT_TRUE(std::isnan(marchenko_pastur_cdf(1.0, 1.5, 1.0)));
    EXPECT_TRUE(std::isnan(marchenko_pastur_cdf(kNaN, 0.5, 1.0)));
}

TEST(SpectralFits, MarchenkoPasturFitAndKs) {
    // Fit formulas of metrics.md on hand numbers: s = 1, Q = 4: l+0 = 2.25, l- = 0.25.
    const std::vector<double> esd = {0.3, 0.5, 1.0, 2.0, 5.0};
    MarchenkoPasturFit f = fit_marchenko_pastur(esd, std::vector<double>{0.5, 1.0, 2.0}, 1.0, 4.0, 5);
    EXPECT_DOUBLE_EQ(f.esd_max, 2.25);
    EXPECT_DOUBLE_EQ(f.esd_min, 0.25);
    EXPECT_DOUBLE_EQ(f.bulk_std, 1.0);
    // A null eigenvalue above l+0 triggers the re-estimate: s^2 = (0.5 + 1 + 2) / 5 = 0.7.
    f = fit_marchenko_pastur(esd, std::vector<double>{0.5, 1.0, 2.0, 3.0}, 1.0, 4.0, 5);
    EXPECT_DOUBLE_EQ(f.bulk_std, std::sqrt(0.7));
    EXPECT_DOUBLE_EQ(f.esd_max, 0.7 * 2.25);
    EXPECT_DOUBLE_EQ(f.esd_min, 0.7 * 0.25);
    // mp_esd_max is capped by the largest eigenvalue.
    f = fit_marchenko_pastur(std::vector<double>{0.3, 1.0}, std::vector<double>{0.5}, 1.0, 4.0, 2);
    EXPECT_DOUBLE_EQ(f.esd_max, 1.0);

    // mp_ks of exact MP quantiles at (i - 1/2)/n is 1/(2n) (to the quantile bisection's accuracy).
    const double q = 4.0, sigma = 1.0, y = 1.0 / (q + 1e-8);
    MarchenkoPasturFit fit;
    fit.bulk_std = sigma;
    fit.esd_min = (1 - 1 / std::sqrt(q)) * (1 - 1 / std::sqrt(q));
    fit.esd_max = (1 + 1 / std::sqrt(q)) * (1 + 1 / std::sqrt(q));
    const int n = 400;
    std::vector<double> sample;
    for (int i = 0; i < n; ++i) {
        const double target = (i + 0.5) / n;
        double lo = fit.esd_min, hi = fit.esd_max;
        for (int it = 0; it < 200; ++it) {
            const double mid = 0.5 * (lo + hi);
            (marchenko_pastur_cdf(mid, y, sigma) < target ? lo : hi) = mid;
        }
        sample.push_back(0.5 * (lo + hi));
    }
    EXPECT_NEAR(mp_ks_distance(sample, fit, q), 0.5 / n, 1e-6);
    // Empty window -> 1.
    EXPECT_EQ(mp_ks_distance(std::vector<double>{10.0, 20.0}, fit, q), 1.0);
}

TEST(SpectralFits, TracyWidomMomentsAndQuantiles) {
    // Mean and variance of F1 (Bornemann 2010: -1.2065335745820, 1.6077810345810) by Simpson on each
    // half-line: E X = int_0^inf (1 - F) - int_-inf^0 F, E X^2 = int_0^inf 2s(1 - F) + int_-inf^0 2|s| F.
    auto upper = [](double s) { return 1.0 - tracy_widom1_cdf(s); };
    auto lower = [](double s) { return tracy_widom1_cdf(s); };
    const double m1 = simpson(upper, 0.0, 16.0, 320) - simpson(lower, -12.0, 0.0, 240);
    const double m2 = simpson([&](double s) { return 2 * s * upper(s); }, 0.0, 16.0, 320) +
                      simpson([&](double s) { return -2 * s * lower(s); }, -12.0, 0.0, 240);
    EXPECT_NEAR(m1, -1.2065335745820, 1e-9);
    EXPECT_NEAR(m2 - m1 * m1, 1.6077810345810, 1e-8);

    // Quantiles (4-decimal literature values) and consistency with the CDF.
    EXPECT_NEAR(tracy_widom1_quantile(0.90), 0.4501, 6e-5);
    EXPECT_NEAR(tracy_widom1_quantile(0.95), 0.9793, 6e-5);
    EXPECT_NEAR(tracy_widom1_quantile(0.99), 2.0234, 6e-5);
    EXPECT_NEAR(tracy_widom1_quantile(0.995), 2.4223, 6e-5);
    for (double p : {0.01, 0.3, 0.7, 0.995})
        EXPECT_NEAR(tracy_widom1_cdf(tracy_widom1_quantile(p)), p, 1e-11) << p;
    EXPECT_EQ(tracy_widom1_quantile(0.0), -std::numeric_limits<double>::infinity());
    EXPECT_EQ(tracy_widom1_quantile(1.0), std::numeric_limits<double>::infinity());
    EXPECT_TRUE(std::isnan(tracy_widom1_cdf(kNaN)));
    EXPECT_EQ(tracy_widom1_cdf(-50.0), 0.0);
    EXPECT_EQ(tracy_widom1_cdf(50.0), 1.0);
}

TEST(SpectralFits, TwEsdBound) {
    const std::size_t N = 1000, M = 250;
    const double std_ = 0.5, p = 0.005;
    const double a = std::sqrt(999.0) + std::sqrt(250.0);
    const double b = 1 / std::sqrt(999.0) + 1 / std::sqrt(250.0);
    const double c = 0.25 / 1000.0;
    EXPECT_NEAR(tw_esd_bound(N, M, std_, p), c * a * a + c * a * std::cbrt(b) * tracy_widom1_quantile(0.995),
                1e-15);
    // The bound sits just above the MP edge s^2 (1 + 1/sqrt Q)^2 for large matrices.
    EXPECT_GT(tw_esd_bound(N, M, std_, p), 0.25 * 2.25);
    EXPECT_TRUE(std::isnan(tw_esd_bound(1, M, std_, p)));
    EXPECT_TRUE(std::isnan(tw_esd_bound(N, M, std_, 0.0)));
}

TEST(SpectralFits, Wasserstein1HandCases) {
    EXPECT_DOUBLE_EQ(wasserstein1(std::vector<double>{0.0}, std::vector<double>{1.0}), 1.0);
    EXPECT_DOUBLE_EQ(wasserstein1(std::vector<double>{1.0, 0.0}, std::vector<double>{0.0, 1.0}), 0.0);
    // Disjoint supports: the difference of the means, 5.5 - 4/3.
    EXPECT_NEAR(wasserstein1(std::vector<double>{0.0, 1.0, 3.0}, std::vector<double>{5.0, 6.0}),
                5.5 - 4.0 / 3.0, 1e-15);
    EXPECT_DOUBLE_EQ(wasserstein1(std::vector<double>{1.0, 2.0}, std::vector<double>{1.5}), 0.5);
    // Symmetric, and ties across the two samples.
    EXPECT_DOUBLE_EQ(wasserstein1(std::vector<double>{1.0, 1.0, 2.0}, std::vector<double>{1.0, 3.0}),
                     wasserstein1(std::vector<double>{1.0, 3.0}, std::vector<double>{1.0, 1.0, 2.0}));
    EXPECT_NEAR(wasserstein1(std::vector<double>{1.0, 1.0, 2.0}, std::vector<double>{1.0, 3.0}), 2.0 / 3.0,
                1e-15);
    EXPECT_TRUE(std::isnan(wasserstein1(std::vector<double>{}, std::vector<double>{1.0})));
    EXPECT_TRUE(std::isnan(wasserstein1(std::vector<double>{kNaN}, std::vector<double>{1.0})));
}

TEST(SpectralFits, BootstrapPValueIsDeterministic) {
    const auto x = pareto_grid(300, 0.01, 2.5);
    const TailFit f = fit_power_law(x);
    const double p1 = tail_p_value(f, x, kTailPowerLaw, 20, 7);
    const double p2 = tail_p_value(f, x, kTailPowerLaw, 20, 7);
    EXPECT_EQ(p1, p2);
    EXPECT_GE(p1, 0.0);
    EXPECT_LE(p1, 1.0);
    // An exact power-law grid fits better than almost any random sample from the fit.
    EXPECT_GT(p1, 0.5);
    const auto xe = exponential_grid(300, 0.5, 4.0);
    const TailFit e = fit_exponential(xe);
    const double pe = tail_p_value(e, xe, kTailExponential, 20, 7);
    EXPECT_GE(pe, 0.0);
    EXPECT_LE(pe, 1.0);
    // Fewer than 50 tail points, unknown kind: NaN.
    const auto small = pareto_grid(40, 0.01, 2.5);
    EXPECT_TRUE(std::isnan(tail_p_value(fit_power_law(small), small, kTailPowerLaw, 20, 7)));
    EXPECT_TRUE(std::isnan(tail_p_value(f, x, 9, 20, 7)));
}

// The truncated-power-law sampler against its CDF, computed by quadrature here, on both proposals'
// sides ((α-1) vs λ·x_min), including the heavy tail where powerlaw's exponential proposal needs
// ~10^6 tries per value: the KS distance of 20000 draws stays below 1.63/sqrt(n) (the 1 % level).
TEST(SpectralFits, TruncatedPowerLawDrawsFollowTheirDistribution) {
    struct Case {
        double x_min, alpha, lambda;
    };
    for (const Case c :
         {Case{1.0, 2.5, 1e-6}, Case{1.0, 1.3, 0.05}, Case{0.5, 2.0, 8.0}, Case{2.0, 3.0, 0.5}}) {
        diffract::Xoshiro256Rng rng(11);
        const int n = 20000;
        std::vector<double> x(n);
        for (auto& v : x) v = draw_truncated_power_law(rng, c.x_min, c.alpha, c.lambda);
        std::sort(x.begin(), x.end());
        // CDF by the trapezoid rule in log x on a fine grid up to where the density is negligible.
        const int grid = 200000;
        const double hi = c.x_min * std::exp(std::min(40.0, std::log(1.0 + 60.0 / (c.lambda * c.x_min))));
        std::vector<double> t(grid + 1), cdf(grid + 1, 0.0);
        auto f = [&](double u) { return std::pow(u, 1.0 - c.alpha) * std::exp(-c.lambda * u); };  // x·p(x)
        const double h = std::log(hi / c.x_min) / grid;
        for (int i = 0; i <= grid; ++i) t[i] = c.x_min * std::exp(h * i);
        for (int i = 1; i <= grid; ++i) cdf[i] = cdf[i - 1] + 0.5 * h * (f(t[i - 1]) + f(t[i]));
        for (auto& v : cdf) v /= cdf.back();
        double d = 0;
        for (int k = 0; k < n; ++k) {
            const auto it = std::upper_bound(t.begin(), t.end(), x[k]);
            const auto i = std::min<std::ptrdiff_t>(it - t.begin(), grid);
            const double F = cdf[static_cast<std::size_t>(i)];
            d = std::max(
                {d, std::abs(F - static_cast<double>(k) / n), std::abs(F - static_cast<double>(k + 1) / n)});
        }
        EXPECT_LT(d, 1.63 / std::sqrt(n)) << c.x_min << " " << c.alpha << " " << c.lambda;
        EXPECT_GE(x.front(), c.x_min);
    }
}

// The resampling fields' progress (issue 16): every bootstrap draw of a p-value and of the alpha CI
// ticks once, and resampling_draws predicts the total the run layer's progress line counts.
TEST(ResamplingProgress, EachDrawTicksOnceAndTheCatalogCountsThem) {
    const auto esd = pareto_grid(400, 1.0, 2.5);
    const auto fit = fit_power_law(esd);
    ASSERT_GE(fit.n_tail, 50u);
    std::size_t ticks = 0;
    const DrawTick tick = [&] { ++ticks; };
    const double p = tail_p_value(fit, esd, kTailPowerLaw, 23, 7, tick);
    EXPECT_TRUE(p >= 0 && p <= 1);
    EXPECT_EQ(ticks, 23u);
    ticks = 0;
    const auto ci = power_law_alpha_ci(esd, 9, 3, 0.95, tick);
    EXPECT_TRUE(std::isfinite(ci.low) && std::isfinite(ci.high));
    EXPECT_EQ(ticks, 9u);
    // Without a tick the values are the same draws.
    EXPECT_EQ(tail_p_value(fit, esd, kTailPowerLaw, 23, 7), p);

    KernelConfig config;
    config.p_value_bootstraps = 17;
    config.alpha_ci_draws = 5;
    EXPECT_EQ(resampling_draws(resolve_metrics("pl_p_value,tpl_p_value,pl_alpha_ci_low"), config),
              2u * 17 + 5);
    EXPECT_EQ(resampling_draws(resolve_metrics("default"), config), 0u);
}
