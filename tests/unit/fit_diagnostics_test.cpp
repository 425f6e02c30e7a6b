// Fit diagnostics (issue 18): tail sizes, statuses, the minimum fit size and the runner-up x_min. The
// flags are checked to fire exactly where their rule says, on seeded simulated ESDs with known shape; the
// runner-up against powerlaw's own KS landscape is in tests/python/test_fit_diagnostics.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/fit_status.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/linalg/backend.hpp"
#include "random_matrix.hpp"

using namespace diffract;
using namespace diffract::analysis;

namespace {

// A rows x cols matrix whose ESD (sigma^2 / N, N = max(rows, cols)) is `esd`: the diagonal matrix.
Matrix<double> with_esd(const std::vector<double>& esd, std::int64_t rows, std::int64_t cols) {
    Matrix<double> w(rows, cols);
    std::fill(w.data.begin(), w.data.end(), 0.0);
    const double n = static_cast<double>(std::max(rows, cols));
    for (std::size_t i = 0; i < esd.size(); ++i)
        w(static_cast<std::int64_t>(i), static_cast<std::int64_t>(i)) = std::sqrt(esd[i] * n);
    return w;
}

std::vector<double> pareto_sample(std::size_t n, double alpha, double xmin, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> x(n);
    for (auto& v : x) v = xmin * std::pow(1.0 - u(rng), -1.0 / (alpha - 1.0));
    std::sort(x.begin(), x.end());
    return x;
}

std::vector<double> exponential_sample(std::size_t n, double lambda, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> x(n);
    for (auto& v : x) v = -std::log(1.0 - u(rng)) / lambda;
    std::sort(x.begin(), x.end());
    return x;
}

// Inverse-CDF grids (exact, no randomness).
std::vector<double> pareto_grid(std::size_t n, double xmin, double alpha, double xmax = INFINITY) {
    std::vector<double> x;
    for (std::size_t i = 0; i < n; ++i) {
        const double u = (static_cast<double>(i) + 0.5) / static_cast<double>(n);
        const double v = xmin * std::pow(1.0 - u, -1.0 / (alpha - 1.0));
        if (v < xmax) x.push_back(v);
    }
    return x;
}

FieldValues fields_of(const Matrix<double>& w, const std::vector<std::string>& fields, int min_fit_size) {
    KernelConfig cfg;
    cfg.min_fit_size = min_fit_size;
    auto backend = linalg::make_backend("cpu");
    return compute_fields(w, fields, cfg, *backend);
}

double status_of(const FieldValues& v, const char* field) { return v.scalars.at(field); }
double code(FitStatus s) { return static_cast<double>(s); }

}  // namespace

TEST(FitStatus, NamesAndCodesRoundTrip) {
    for (auto s : {FitStatus::ok, FitStatus::too_few, FitStatus::no_convergence, FitStatus::at_bound_alpha,
                   FitStatus::at_bound_lambda}) {
        const auto name = fit_status_name(static_cast<double>(s));
        EXPECT_EQ(name, fit_status_name(s));
        ASSERT_TRUE(fit_status_code(name).has_value());
        EXPECT_EQ(*fit_status_code(name), static_cast<double>(s));
    }
    EXPECT_EQ(fit_status_name(FitStatus::at_bound_alpha), "at_bound:alpha");
    EXPECT_EQ(fit_status_name(std::nan("")), "nan");
    EXPECT_EQ(fit_status_name(7.0), "unknown");
    EXPECT_TRUE(std::isnan(*fit_status_code("nan")));
    EXPECT_FALSE(fit_status_code("at_bound:beta").has_value());
    EXPECT_TRUE(is_status_field("pl_status") && is_status_field("mp_status"));
    EXPECT_FALSE(is_status_field("pl_alpha") || is_status_field("my_status"));
}

TEST(FitStatus, RulesInOrder) {
    TailFit f;
    f.alpha = 2.0, f.lambda = 3.0, f.n_tail = 50;
    EXPECT_EQ(tail_fit_status(f, true, true, 50), FitStatus::ok);
    EXPECT_EQ(tail_fit_status(f, true, true, 51), FitStatus::too_few);
    EXPECT_EQ(tail_fit_status(f, true, true, 0), FitStatus::ok);
    f.converged = false;
    EXPECT_EQ(tail_fit_status(f, true, true, 50), FitStatus::no_convergence);
    f.converged = true;
    f.alpha = 1.0 + 0.9e-4;  // within the optimiser's tolerance of the bound
    EXPECT_EQ(tail_fit_status(f, true, true, 50), FitStatus::at_bound_alpha);
    f.alpha = 1.0 + 1.1e-4;
    EXPECT_EQ(tail_fit_status(f, true, true, 50), FitStatus::ok);
    f.lambda = 0.9e-4;
    EXPECT_EQ(tail_fit_status(f, true, true, 50), FitStatus::at_bound_lambda);
    EXPECT_EQ(tail_fit_status(f, true, false, 50), FitStatus::at_bound_lambda);  // exponential
    f.alpha = 1.0;  // both at a bound: alpha is named
    EXPECT_EQ(tail_fit_status(f, true, true, 50), FitStatus::at_bound_alpha);
    f.alpha = 1.0;  // the power law has no optimised bound
    EXPECT_EQ(tail_fit_status(f, false, true, 50), FitStatus::ok);
    f.n_tail = 0;  // no fit possible: too_few even with no minimum
    EXPECT_EQ(tail_fit_status(f, false, true, 0), FitStatus::too_few);
}

// Pareto ESDs of many sizes: pl_status is too_few exactly when the KS-optimal tail holds fewer than the
// minimum; the estimates are the unmodified powerlaw port either way (a too_few fit is shown flagged,
// not dropped), only the diagnostics that presume a trustworthy tail are NaN.
TEST(FitDiagnostics, TooFewFiresExactlyBelowTheMinimum) {
    const std::vector<std::string> fields = {"esd",
                                             "pl_alpha",
                                             "pl_esd_xmin",
                                             "pl_ks",
                                             "pl_n_tail",
                                             "pl_status",
                                             "pl_alpha_weighted",
                                             "pl_alpha_norm",
                                             "pl_concentration",
                                             "pl_presence"};
    int too_few = 0, ok = 0;
    for (std::uint64_t seed = 0; seed < 24; ++seed) {
        const std::size_t n = 30 + 15 * seed;
        const auto esd = pareto_sample(n, seed % 2 ? 2.5 : 4.0, 0.01, seed);
        const auto w = with_esd(esd, static_cast<std::int64_t>(n), static_cast<std::int64_t>(n) + 7);
        const auto v = fields_of(w, fields, 50);
        const auto raw = fit_power_law(v.vectors.at("esd"));
        EXPECT_EQ(v.scalars.at("pl_n_tail"), static_cast<double>(raw.n_tail));
        EXPECT_EQ(v.scalars.at("pl_esd_xmin"), raw.xmin);
        if (raw.n_tail < 50) {
            ++too_few;
            EXPECT_EQ(status_of(v, "pl_status"), code(FitStatus::too_few)) << n;
            EXPECT_EQ(v.scalars.at("pl_alpha"), raw.alpha) << n;
            EXPECT_EQ(v.scalars.at("pl_ks"), raw.ks) << n;
            EXPECT_TRUE(std::isfinite(v.scalars.at("pl_alpha_weighted"))) << n;
            for (const char* f : {"pl_concentration", "pl_presence"})
                EXPECT_TRUE(std::isnan(v.scalars.at(f))) << f << " n=" << n;
        } else {
            ++ok;
            EXPECT_EQ(status_of(v, "pl_status"), code(FitStatus::ok)) << n;
            EXPECT_EQ(v.scalars.at("pl_alpha"), raw.alpha);
            EXPECT_EQ(v.scalars.at("pl_ks"), raw.ks);
        }
        // With no minimum every fit is reported, as the reference library reports it.
        const auto all = fields_of(w, fields, 0);
        EXPECT_EQ(status_of(all, "pl_status"), code(FitStatus::ok));
        EXPECT_EQ(all.scalars.at("pl_alpha"), raw.alpha);
    }
    EXPECT_GT(too_few, 3);
    EXPECT_GT(ok, 3);
}

// An exponential ESD has no power-law part: the truncated power law's alpha runs into its bound 1 (as on
// half of a real BERT's matrices) and is flagged at_bound:alpha exactly when it lies within 1e-4 of it.
TEST(FitDiagnostics, TruncatedPowerLawAlphaAtItsBound) {
    const std::vector<std::string> fields = {"esd", "tpl_alpha", "tpl_lambda", "tpl_n_tail", "tpl_status"};
    int at_bound = 0, fitted = 0;
    for (std::uint64_t seed = 0; seed < 12; ++seed) {
        const auto esd = exponential_sample(300, 2.0, 100 + seed);
        const auto v = fields_of(with_esd(esd, 300, 400), fields, 50);
        const auto raw = fit_truncated_power_law(v.vectors.at("esd"));
        const double status = status_of(v, "tpl_status");
        EXPECT_EQ(v.scalars.at("tpl_n_tail"), static_cast<double>(raw.n_tail));
        if (raw.n_tail < 50) {
            EXPECT_EQ(status, code(FitStatus::too_few));
            continue;
        }
        ++fitted;
        EXPECT_EQ(v.scalars.at("tpl_alpha"), raw.alpha);  // flagged, still reported
        const bool bound = raw.alpha <= 1.0 + 1e-4;
        at_bound += bound;
        if (bound)
            EXPECT_EQ(status, code(FitStatus::at_bound_alpha));
        else
            EXPECT_NE(status, code(FitStatus::at_bound_alpha));
    }
    EXPECT_GT(fitted, 3);
    EXPECT_GT(at_bound, 0);
    // A pure Pareto tail has no exponential cutoff: Lambda often runs into its bound 0, flagged exactly then.
    int lambda_bound = 0;
    for (std::uint64_t seed = 0; seed < 12; ++seed) {
        const auto tpl = fit_truncated_power_law(pareto_sample(400, 2.5, 1.0, 200 + seed));
        ASSERT_GE(tpl.n_tail, 50u);
        const bool bound = tpl.lambda <= 1e-4 && tpl.alpha > 1.0 + 1e-4;
        lambda_bound += bound;
        EXPECT_EQ(tail_fit_status(tpl, true, true, 50) == FitStatus::at_bound_lambda, bound) << tpl.lambda;
    }
    EXPECT_GT(lambda_bound, 0);
    // A Pareto tail cut off exponentially is an ordinary fit.
    std::vector<double> cut;
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    while (cut.size() < 400) {  // x^-2.5 e^(-x / 20) by rejection from the Pareto
        const double x = std::pow(1.0 - u(rng), -1.0 / 1.5);
        if (u(rng) < std::exp(-x / 20.0)) cut.push_back(x);
    }
    std::sort(cut.begin(), cut.end());
    const auto tpl = fit_truncated_power_law(cut);
    EXPECT_GE(tpl.n_tail, 50u);
    EXPECT_EQ(tail_fit_status(tpl, true, true, 50), FitStatus::ok) << tpl.alpha << " " << tpl.lambda;
    EXPECT_TRUE(tpl.converged);
}

TEST(FitDiagnostics, MarchenkoPasturBulkSize) {
    const std::vector<std::string> fields = {"esd",           "mp_esd_max",      "mp_esd_min", "mp_ks",
                                             "mp_num_spikes", "mp_n_bulk",       "mp_status",  "mp_bulk_std",
                                             "tw_esd_bound",  "mp_concentration"};
    // 2 x 384 (token_type_embeddings): two eigenvalues, no MP fit reported.
    const auto tiny = fields_of(test_data::random_matrix(2, 384, 1), fields, 50);
    EXPECT_EQ(status_of(tiny, "mp_status"), code(FitStatus::too_few));
    EXPECT_LE(tiny.scalars.at("mp_n_bulk"), 2.0);
    for (const char* f : {"mp_esd_max", "mp_ks", "mp_num_spikes", "mp_bulk_std", "tw_esd_bound"})
        EXPECT_TRUE(std::isnan(tiny.scalars.at(f))) << f;
    // A Gaussian 200 x 400: nearly every eigenvalue in the bulk; the fit as without a minimum.
    const auto w = test_data::random_matrix(200, 400, 2);
    const auto big = fields_of(w, fields, 50), all = fields_of(w, fields, 0);
    EXPECT_EQ(status_of(big, "mp_status"), code(FitStatus::ok));
    const auto& esd = big.vectors.at("esd");
    const double lo = big.scalars.at("mp_esd_min"), hi = big.scalars.at("mp_esd_max");
    const double inside = static_cast<double>(
        std::count_if(esd.begin(), esd.end(), [&](double l) { return l >= lo && l <= hi; }));
    EXPECT_GE(big.scalars.at("mp_n_bulk"), 190.0);
    EXPECT_EQ(big.scalars.at("mp_n_bulk"), inside);
    EXPECT_DOUBLE_EQ(big.scalars.at("mp_n_bulk"), big.scalars.at("mp_concentration") * 200.0);
    EXPECT_EQ(big.scalars.at("mp_esd_max"), all.scalars.at("mp_esd_max"));
    EXPECT_EQ(big.scalars.at("mp_ks"), all.scalars.at("mp_ks"));
    // With the minimum above the bulk's size, the same matrix is too_few.
    EXPECT_EQ(status_of(fields_of(w, fields, 201), "mp_status"), code(FitStatus::too_few));
}

// Two power-law regimes (alpha 2 up to 30, alpha 6 above): the KS landscape has two near-equal minima and
// the runner-up x_min shows the other exponent; on one clean Pareto tail it agrees with the fit.
TEST(FitDiagnostics, RunnerUpXminShowsTwoRegimes) {
    std::vector<double> body;
    for (int i = 0; i < 300; ++i) body.push_back((i + 0.5) / 300.0);
    auto two = body;
    for (double x : pareto_grid(400, 3.0, 2.0, 30.0)) two.push_back(x);
    for (double x : pareto_grid(80, 30.0, 6.0)) two.push_back(x);
    std::sort(two.begin(), two.end());
    const auto fit = fit_power_law(two);
    const auto second = power_law_runner_up(two, 50);
    ASSERT_GE(second.n_tail, 50u);
    EXPECT_TRUE(2 * second.n_tail <= fit.n_tail || second.n_tail >= 2 * fit.n_tail);
    EXPECT_GE(second.ks_gap, 0.0);
    EXPECT_GT(std::fabs(fit.alpha - second.alpha), 2.0) << fit.alpha << " vs " << second.alpha;
    // The gap is inside the 95 % Kolmogorov band of the runner-up's tail (1.36 / sqrt n): the data do not
    // tell the two x_min apart.
    EXPECT_LT(second.ks_gap, 1.36 / std::sqrt(static_cast<double>(second.n_tail)));

    auto clean = body;
    for (double x : pareto_grid(200, 1.05, 3.0)) clean.push_back(x);
    std::sort(clean.begin(), clean.end());
    const auto fit1 = fit_power_law(clean);
    const auto second1 = power_law_runner_up(clean, 50);
    EXPECT_NEAR(fit1.alpha, 3.0, 0.2);
    ASSERT_GE(second1.n_tail, 50u);
    EXPECT_LT(std::fabs(fit1.alpha - second1.alpha), 0.3) << fit1.alpha << " vs " << second1.alpha;
    // No candidate far enough from the optimum with a large enough tail: NaN.
    const auto none = power_law_runner_up(clean, 100000);
    EXPECT_TRUE(std::isnan(none.alpha) && std::isnan(none.ks_gap));
    EXPECT_EQ(none.n_tail, 0u);
}

// The bootstrap interval of pl_alpha covers the true exponent at about its nominal 95 % over seeded
// simulated Pareto ESDs (x_min searched in every draw, as in the fit).
TEST(FitDiagnostics, AlphaIntervalCoversAtItsNominalRate) {
    constexpr int kSims = 200;
    constexpr double kAlpha = 2.5;
    int covered = 0;
    double width = 0;
    for (int sim = 0; sim < kSims; ++sim) {
        const auto esd = pareto_sample(300, kAlpha, 1.0, 1000 + static_cast<std::uint64_t>(sim));
        const auto ci = power_law_alpha_ci(esd, 200, static_cast<std::uint64_t>(sim));
        ASSERT_LT(ci.low, ci.high);
        covered += ci.low <= kAlpha && kAlpha <= ci.high;
        width += ci.high - ci.low;
    }
    const double rate = static_cast<double>(covered) / kSims;
    // 95 % nominal; 200 simulations have a binomial sd of 1.5 %: accept 91 % .. 100 %. Not by being wide:
    // at most twice the interval with x_min known, 2 x 1.96 (alpha - 1) / sqrt(300) (Clauset et al. eq. 3.2).
    EXPECT_GE(rate, 0.91) << "coverage " << rate << ", mean width " << width / kSims;
    EXPECT_LT(width / kSims, 2.0 * 2.0 * 1.96 * (kAlpha - 1.0) / std::sqrt(300.0));
    std::printf("pl_alpha 95 %% bootstrap interval: coverage %.3f over %d simulations, mean width %.3f\n",
                rate, kSims, width / kSims);
    // Deterministic per seed; another seed draws other resamples; off or unfit: NaN.
    const auto esd = pareto_sample(300, kAlpha, 1.0, 7);
    const auto a = power_law_alpha_ci(esd, 50, 3), b = power_law_alpha_ci(esd, 50, 3),
               c = power_law_alpha_ci(esd, 50, 4);
    EXPECT_EQ(a.low, b.low);
    EXPECT_EQ(a.high, b.high);
    EXPECT_TRUE(a.low != c.low || a.high != c.high);
    EXPECT_TRUE(std::isnan(power_law_alpha_ci(esd, 0, 3).low));
    EXPECT_TRUE(std::isnan(power_law_alpha_ci(std::vector<double>{1.0, 1.0}, 50, 3).high));
}

// Through the kernel: off by default (NaN), on with --alpha-ci draws, NaN for a too_few fit.
TEST(FitDiagnostics, AlphaIntervalFields) {
    const std::vector<std::string> fields = {"esd", "pl_alpha", "pl_alpha_ci_low", "pl_alpha_ci_high"};
    const auto esd = pareto_sample(300, 2.5, 0.01, 11);
    const auto w = with_esd(esd, 300, 320);
    auto backend = linalg::make_backend("cpu");
    KernelConfig cfg;
    auto off = compute_fields(w, fields, cfg, *backend);
    EXPECT_TRUE(std::isnan(off.scalars.at("pl_alpha_ci_low")) &&
                std::isnan(off.scalars.at("pl_alpha_ci_high")));
    cfg.alpha_ci_draws = 100;
    cfg.alpha_ci_seed = 5;
    auto on = compute_fields(w, fields, cfg, *backend);
    const auto direct = power_law_alpha_ci(on.vectors.at("esd"), 100, 5);
    EXPECT_EQ(on.scalars.at("pl_alpha_ci_low"), direct.low);
    EXPECT_EQ(on.scalars.at("pl_alpha_ci_high"), direct.high);
    EXPECT_LE(on.scalars.at("pl_alpha_ci_low"), on.scalars.at("pl_alpha"));
    EXPECT_GE(on.scalars.at("pl_alpha_ci_high"), on.scalars.at("pl_alpha"));
    EXPECT_NE(cfg.key(), KernelConfig{}.key());  // stored results are keyed by the draws and seed
    cfg.min_fit_size = 100000;
    auto few = compute_fields(w, fields, cfg, *backend);
    EXPECT_TRUE(std::isnan(few.scalars.at("pl_alpha_ci_low")));
}

// Issue 32: every field of the catalog comes from a kernel that produces it. Asking for all of them at
// once (and each alone, so that no kernel relies on another's output being present by accident)
// returns each as a scalar or a vector; compute_fields throws, never fills a NaN, for a field that no
// kernel produced.
TEST(FitDiagnostics, EveryCatalogFieldIsProducedByItsKernel) {
    auto backend = linalg::make_backend("cpu");
    KernelConfig cfg;
    cfg.min_fit_size = 0;
    cfg.p_value_bootstraps = 3;
    cfg.alpha_ci_draws = 3;
    cfg.null_draws = 2;
    const auto w = with_esd(pareto_sample(60, 2.5, 0.01, 3), 60, 70);
    std::vector<std::string> all;
    for (const auto& f : field_catalog())
        if (f.level == Level::parameter) all.push_back(std::string(f.name));
    ASSERT_GT(all.size(), 50u);
    const auto every = compute_fields(w, all, cfg, *backend);
    for (const auto& f : all) {
        EXPECT_TRUE(every.scalars.count(f) || every.vectors.count(f)) << f;
        const auto one = compute_fields(w, {f}, cfg, *backend);
        EXPECT_TRUE(one.scalars.count(f) || one.vectors.count(f)) << f;
    }
}

// Issue 34: the noise floor of the head ranking. The modified z-score against a hand computation
// (median 3, MAD 1: z = 0.6745 (x - 3)); MAD 0 gives 0 at the median and +inf above it; NaN stays NaN.
TEST(HeadNoiseFloor, RobustZByHand) {
    const auto z = robust_z({1, 2, 3, 4, 10, std::nan("")});
    ASSERT_EQ(z.size(), 6u);
    // finite values 1 2 3 4 10: median 3; |dev| 2 1 0 1 7: MAD 1
    EXPECT_DOUBLE_EQ(z[0], 0.6745 * -2);
    EXPECT_DOUBLE_EQ(z[2], 0.0);
    EXPECT_DOUBLE_EQ(z[4], 0.6745 * 7);
    EXPECT_TRUE(std::isnan(z[5]));
    EXPECT_GT(z[4], kStandsOutZ);
    EXPECT_LT(z[3], kStandsOutZ);
    const auto flat = robust_z({2, 2, 2, 5});
    EXPECT_EQ(flat[0], 0.0);
    EXPECT_TRUE(std::isinf(flat[3]) && flat[3] > 0);
    HeadStats s;
    s.block_norm[0] = 3, s.base_block_norm[0] = 30;  // Q: 10 %
    s.block_norm[3] = 4, s.base_block_norm[3] = 40;  // O: 10 %
    EXPECT_DOUBLE_EQ(s.relative_update(), 0.1);
    EXPECT_DOUBLE_EQ(s.update_norm(), 5.0);
}
