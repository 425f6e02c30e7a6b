// The per-matrix engine: kernels with declared inputs and outputs, run on demand.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <span>

#include <fmt/format.h>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/fit_status.hpp"
#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/core/random.hpp"

namespace diffract::analysis {
namespace {

constexpr double kEps = 1e-16;

template <typename T>
struct Context {
    MatrixInput<T>& input;
    const KernelConfig& config;
    linalg::Backend& backend;
    bool want_vectors = false;
    FieldValues values;
    // The entries, read on first use: values-only metrics with given singular values never read them.
    const Matrix<T>& w() {
        if (input.in_memory) return *input.in_memory;
        if (!input.entries) input.entries = input.read();
        return *input.entries;
    }
    double& s(const std::string& k) { return values.scalars[k]; }
    std::vector<double>& v(const std::string& k) { return values.vectors[k]; }
    // The singular values of null draws 1 .. null_draws - 1 (draw 0 is weights_rand_svals), computed
    // once for the kernels that read them.
    std::optional<std::vector<std::vector<double>>> extra_null_svals;
};

// Σ f(x) by pairwise summation, as numpy sums: up to 128 terms in eight interleaved running sums,
// longer ranges split in two (at a multiple of eight) and the halves' sums added. The error grows
// like ε·log n instead of ε·n, and the eight running sums are independent chains of additions where
// one running sum over 10^8 entries waits 4 cycles on each.
template <typename T, typename F>
double pairwise_sum(std::span<const T> x, F f) {
    constexpr std::size_t kLanes = 8, kBlock = 128;
    const std::size_t n = x.size();
    if (n > kBlock) {
        std::size_t half = n / 2;
        half -= half % kLanes;
        return pairwise_sum(x.first(half), f) + pairwise_sum(x.subspan(half), f);
    }
    double sum = 0;
    std::size_t i = 0;
    if (n >= kLanes) {
        double lane[kLanes];
        for (std::size_t l = 0; l < kLanes; ++l) lane[l] = f(static_cast<double>(x[l]));
        for (i = kLanes; i + kLanes <= n; i += kLanes)
            for (std::size_t l = 0; l < kLanes; ++l) lane[l] += f(static_cast<double>(x[i + l]));
        sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
    for (; i < n; ++i) sum += f(static_cast<double>(x[i]));
    return sum;
}

template <typename T>
double population_std(const Matrix<T>& w) {
    const auto n = static_cast<double>(w.data.size());
    if (w.data.empty()) return kNaN;
    const std::span<const T> x(w.data);
    const double mean = pairwise_sum(x, [](double v) { return v; }) / n;
    return std::sqrt(pairwise_sum(x, [mean](double v) { return (v - mean) * (v - mean); }) / n);
}

double count_above(const std::vector<double>& esd, double bound) {
    return static_cast<double>(std::count_if(esd.begin(), esd.end(), [&](double l) { return l > bound; }));
}

double presence(const std::vector<double>& esd, double xmin) {
    if (esd.empty() || std::isnan(xmin)) return kNaN;
    const double width = esd.back() - esd.front();
    return width == 0 ? kNaN : (esd.back() - xmin) / width;
}

double concentration(const std::vector<double>& esd, double xmin) {
    if (esd.empty() || std::isnan(xmin)) return kNaN;
    return static_cast<double>(esd.end() - std::lower_bound(esd.begin(), esd.end(), xmin)) /
           static_cast<double>(esd.size());
}

// sum lambda^alpha; NaN when lambda_max > 0 but the sum is not finite and positive.
double alpha_norm(const std::vector<double>& esd, double alpha) {
    if (std::isnan(alpha)) return kNaN;
    double s = 0;
    for (double l : esd) s += std::pow(l, alpha);
    if (!esd.empty() && esd.back() > 0 && !(std::isfinite(s) && s > 0)) return kNaN;
    return s;
}

std::vector<double> squared_over(const std::vector<double>& svals, double n) {
    std::vector<double> e(svals.size());
    for (std::size_t i = 0; i < e.size(); ++i) e[i] = svals[i] * svals[i] / n;
    std::sort(e.begin(), e.end());
    return e;
}

// The permutation null: every entry moved by one Fisher-Yates shuffle, seeded per draw.
template <typename T>
void permute_in_place(Matrix<T>& p, std::int64_t seed) {
    std::uint64_t state =
        seed < 0 ? std::random_device{}() : stream_seed(static_cast<std::uint64_t>(seed), "weights_rand");
    shuffle(std::span<T>(p.data), state);
}

template <typename T>
Matrix<T> permuted(const Matrix<T>& w, std::int64_t seed) {
    Matrix<T> p = w;
    permute_in_place(p, seed);
    return p;
}

template <typename T>
Matrix<float> narrowed(const Matrix<T>& w) {
    Matrix<float> f(w.rows, w.cols);
    std::copy(w.data.begin(), w.data.end(), f.data.begin());
    return f;
}

// An f64 entry beyond f32's range narrows to ±Inf: the null of such a matrix stays in f64.
bool finite(const Matrix<float>& p) { return count_nonfinite(std::span<const float>(p.data)) == 0; }

// Whether the null goes to the backend in f32 (linalg::null_in_f32: tall enough for its spectrum to
// be well-conditioned); the gesdd route keeps the matrix's own precision.
template <typename T>
bool f32_null(const Context<T>& c) {
    return c.config.route != linalg::SvdRoute::gesdd && linalg::null_in_f32(c.input.rows, c.input.cols);
}

// The values of a null narrowed to f32 (f32_null). The f32 tier promises every field at least f32
// sgesdd's accuracy (docs/metrics.md, "The f32 tier's contract"), the null's included, so there the null
// takes the values' own f32 route (an f32 Gram product, f64 eigenvalues, guarded): the all-f32
// null_singular_values errs by up to ~2e-5 on σ_min where sgesdd errs by ~2e-6. The f64 tier keeps that
// faster null, whose error is far inside the draw's own spread (docs/metrics.md, the null).
template <typename T>
std::vector<double> narrowed_null_values(Context<T>& c, const Matrix<float>& p) {
    if constexpr (std::is_same_v<T, float>)
        return c.backend.singular_values(p, c.config.route);
    else
        return c.backend.null_singular_values(p, c.config.route);
}

// Draw `d` of the null from the entries, which stay (in-memory input, or further draws follow).
template <typename T>
std::vector<double> copied_null_values(Context<T>& c, std::int64_t seed) {
    const auto& w = c.w();
    if (f32_null(c)) {
        auto p = narrowed(w);
        if (finite(p)) {
            permute_in_place(p, seed);
            return narrowed_null_values(c, p);
        }
    }
    return c.backend.singular_values(permuted(w, seed), c.config.route);
}

// Draw 0 of the null. rand_svd is the last kernel to read the entries unless further null draws
// permute them again, so entries the computation owns are shuffled where they are (the same
// permutation, hence the same values, as a copy would get) instead of doubling the memory of a
// matrix that may be gigabytes (a 100k-row embedding is 3.3 GB in f64). An f32 null of f64 entries
// is read again narrowed (read_f32) after the f64 entries are released, for the same reason.
template <typename T>
std::vector<double> null_draw_values(Context<T>& c) {
    const auto& cfg = c.config;
    if (c.input.in_memory || cfg.null_draws > 1) return copied_null_values(c, cfg.rand_seed);
    if (f32_null(c)) {
        Matrix<float> p;
        if constexpr (std::is_same_v<T, float>) {
            c.w();
            p = std::move(*c.input.entries);
        } else {
            c.input.entries.reset();
            p = c.input.read_f32 ? c.input.read_f32() : narrowed(c.input.read());
        }
        if (finite(p)) {
            c.input.entries.reset();  // no longer the matrix's entries: a later reader would read them again
            permute_in_place(p, cfg.rand_seed);
            return narrowed_null_values(c, p);
        }
        if constexpr (std::is_same_v<T, float>) c.input.entries = std::move(p);  // as they were
    }
    c.w();  // read now when not yet read: then the computation owns the entries
    permute_in_place(*c.input.entries, cfg.rand_seed);
    auto values = c.backend.singular_values(*c.input.entries, cfg.route);
    c.input.entries.reset();  // as above
    return values;
}

// The singular values of the extra null draws (--null-draws K > 1: draws 1 .. K-1, permuted with seed
// rand_seed + d; unseeded stays unseeded).
template <typename T>
const std::vector<std::vector<double>>& extra_null_svals(Context<T>& c) {
    if (!c.extra_null_svals) {
        c.extra_null_svals.emplace();
        const auto& cfg = c.config;
        for (int d = 1; d < cfg.null_draws; ++d)
            c.extra_null_svals->push_back(copied_null_values(c, cfg.rand_seed < 0 ? -1 : cfg.rand_seed + d));
    }
    return *c.extra_null_svals;
}

// Replaces `field` (draw 0's value) by its mean over the --null-draws draws and sets FIELD_null_std
// (ddof 1; NaN for a single draw). `of_draw` gives a draw's value from its singular values.
template <typename T>
void summarise_null(Context<T>& c, const std::string& field,
                    const std::function<double(const std::vector<double>&)>& of_draw) {
    std::vector<double> x{c.s(field)};
    for (const auto& sv : extra_null_svals(c)) x.push_back(of_draw(sv));
    const auto k = static_cast<double>(x.size());
    const double mean = std::accumulate(x.begin(), x.end(), 0.0) / k;
    double ss = 0;
    for (double v : x) ss += (v - mean) * (v - mean);
    c.s(field) = x.size() == 1 ? x[0] : mean;
    c.s(field + "_null_std") = x.size() == 1 ? kNaN : std::sqrt(ss / (k - 1));
}

double largest(const std::vector<double>& v) {
    return v.empty() ? kNaN : *std::max_element(v.begin(), v.end());
}
double smallest(const std::vector<double>& v) {
    return v.empty() ? kNaN : *std::min_element(v.begin(), v.end());
}

// Stores a tail fit and its diagnostics. A too_few fit keeps its values (alpha, lambda, KS, x_min) with
// its status: a reader sees alpha for every matrix, flagged, rather than a hole (WeightWatcher reports
// every fit); the diagnostics that presume a trustworthy tail (concentration, presence) stay NaN.
template <typename T>
void store_fit(Context<T>& c, std::string_view prefix, TailFit f, bool has_lambda, bool has_alpha) {
    const std::string p(prefix);
    const auto& esd = c.v("esd");
    const FitStatus status = tail_fit_status(f, has_lambda, has_alpha, c.config.min_fit_size);
    c.s(p + "_status") = static_cast<double>(status);
    c.s(p + "_n_tail") = static_cast<double>(f.n_tail);
    if (has_alpha) c.s(p + "_alpha") = f.alpha;
    if (has_lambda) c.s(p + "_lambda") = f.lambda;
    c.s(p + "_esd_xmin") = f.xmin;
    c.s(p + "_ks") = f.ks;
    const bool reported = status != FitStatus::too_few;
    c.s(p + "_concentration") = reported ? concentration(esd, f.xmin) : kNaN;
    c.s(p + "_presence") = reported ? presence(esd, f.xmin) : kNaN;
}

template <typename T>
bool too_few(Context<T>& c, const std::string& status_field) {
    return c.s(status_field) == static_cast<double>(FitStatus::too_few);
}

template <typename T>
void shape_kernel(Context<T>& c) {
    const double N = static_cast<double>(std::max(c.input.rows, c.input.cols)),
                 M = static_cast<double>(std::min(c.input.rows, c.input.cols));
    c.s("greater_dim") = N;
    c.s("lower_dim") = M;
    c.s("aspect_ratio") = M > 0 ? N / M : kNaN;
}

template <typename T>
void weights_std_kernel(Context<T>& c) {
    c.s("weights_std") = population_std(c.w());
}

// The matrix's singular values with the precision that served them.
template <typename T>
linalg::Spectrum spectrum(Context<T>& c) {
    if constexpr (std::is_same_v<T, float>)
        return c.backend.f32_spectrum(c.w(), c.config.route);
    else
        return {c.backend.singular_values(c.w(), c.config.route), false};
}

template <typename T>
void svd_kernel(Context<T>& c) {
    if (c.want_vectors) {
        auto svd = c.backend.svd(c.w());
        c.v("weights_svals") = std::move(svd.s);
        c.v("weights_lsvs").assign(svd.u.data.begin(), svd.u.data.end());
        c.v("weights_rsvs").assign(svd.v.data.begin(), svd.v.data.end());
    } else {
        auto s = c.input.singular_values ? std::move(*c.input.singular_values) : spectrum(c);
        if (!s.f32) c.values.bookkeeping.precision_bits = 64;  // the f32 routes could not serve this matrix
        c.v("weights_svals") = std::move(s.s);
    }
}

template <typename T>
void rand_svd_kernel(Context<T>& c) {
    c.v("weights_rand_svals") = null_draw_values(c);
}

// The empirical spectral density λ = σ² / N of the weights (`esd`) or of their permutation null.
template <typename T>
void esd_kernel(Context<T>& c, bool rand) {
    const auto& sv = c.v(rand ? "weights_rand_svals" : "weights_svals");
    auto& e = c.v(rand ? "esd_rand" : "esd");
    e = squared_over(sv, c.s("greater_dim"));
    const std::string p = rand ? "esd_rand" : "esd";
    c.s(p + "_max") = e.empty() ? kNaN : e.back();
    c.s(p + "_min") = e.empty() ? kNaN : e.front();
    c.s(rand ? "max_weights_rand_sval" : "max_weights_sval") = largest(sv);
    c.s(rand ? "min_weights_rand_sval" : "min_weights_sval") = smallest(sv);
    if (rand) {  // --null-draws K > 1: the mean over K draws, and their spread
        const double n = c.s("greater_dim");
        summarise_null(c, "esd_rand_max", [&](const auto& v) { return largest(v) * largest(v) / n; });
        summarise_null(c, "esd_rand_min", [&](const auto& v) { return smallest(v) * smallest(v) / n; });
        summarise_null(c, "max_weights_rand_sval", largest);
        summarise_null(c, "min_weights_rand_sval", smallest);
    }
}

template <typename T>
void norms_kernel(Context<T>& c) {
    const auto& sv = c.v("weights_svals");
    double ss = 0, sum = 0, mx = 0;
    for (double x : sv) ss += x * x, sum += x, mx = std::max(mx, x);
    const double frob = std::sqrt(ss);
    c.s("frob_norm") = frob;
    c.s("nuclear_norm") = sum;
    c.s("l2_norm") = mx;
    c.s("stable_rank") = (frob / (mx + kEps)) * (frob / (mx + kEps));
    double h = 0;
    for (double x : sv) {
        const double p = x / (sum + kEps);
        h -= p * std::log(p + kEps);
    }
    c.s("effective_rank") = std::exp(h);
}

template <typename T>
void hard_rank_kernel(Context<T>& c) {
    const auto& e = c.v("esd");
    c.s("hard_rank") = e.empty() ? 0 : count_above(e, c.config.hard_rank_rtol * e.back());
}

template <typename T>
void marchenko_pastur_kernel(Context<T>& c) {
    const auto& e = c.v("esd");
    const double Q = c.s("aspect_ratio");
    auto fit = fit_marchenko_pastur(e, c.v("esd_rand"), c.s("weights_std"), Q,
                                    static_cast<std::size_t>(c.s("lower_dim")));
    // The bulk the fit describes; below min_fit_size eigenvalues the fit is not reported.
    const auto n_bulk =
        std::count_if(e.begin(), e.end(), [&](double l) { return l >= fit.esd_min && l <= fit.esd_max; });
    const bool too_few = std::isnan(fit.esd_max) || n_bulk < std::max(c.config.min_fit_size, 0);
    c.s("mp_n_bulk") = static_cast<double>(n_bulk);
    c.s("mp_status") = static_cast<double>(too_few ? FitStatus::too_few : FitStatus::ok);
    if (too_few) fit = MarchenkoPasturFit{};
    c.s("mp_esd_max") = fit.esd_max;
    c.s("mp_esd_min") = fit.esd_min;
    c.s("mp_bulk_std") = fit.bulk_std;
    c.s("mp_sval_max") = std::sqrt(fit.esd_max * c.s("greater_dim"));
    c.s("mp_ks") = mp_ks_distance(e, fit, Q);
    bool any_nan = std::isnan(fit.esd_max) || std::isnan(fit.esd_min);
    for (double l : e) any_nan = any_nan || std::isnan(l);
    const double inside = static_cast<double>(
        std::count_if(e.begin(), e.end(), [&](double l) { return l >= fit.esd_min && l <= fit.esd_max; }));
    c.s("mp_concentration") = any_nan || e.empty() ? kNaN : inside / static_cast<double>(e.size());
    const double width = e.empty() ? 0 : e.back() - e.front();
    c.s("mp_presence") = std::clamp((fit.esd_max - fit.esd_min) / (width + kEps), 0.0, 1.0);
    c.s("mp_num_spikes") = too_few ? kNaN : count_above(e, fit.esd_max);
    c.s("mp_soft_rank") = fit.esd_max / ((e.empty() ? kNaN : e.back()) + kEps);
}

template <typename T>
void tracy_widom_kernel(Context<T>& c) {
    const double bound =
        tw_esd_bound(static_cast<std::size_t>(c.s("greater_dim")), static_cast<std::size_t>(c.s("lower_dim")),
                     c.s("mp_bulk_std"), c.config.tw_p);
    c.s("tw_esd_bound") = bound;
    c.s("tw_num_spikes") = count_above(c.v("esd"), bound);
}

template <typename T>
void power_law_kernel(Context<T>& c) {
    const auto& e = c.v("esd");
    const auto f = fit_power_law(e);
    store_fit(c, "pl", f, false, true);
    const double alpha = c.s("pl_alpha");
    c.s("pl_alpha_weighted") = e.empty() ? kNaN : alpha * std::log10(e.back());
    // The model aggregate model_pl_alpha_norm averages trusted fits only: NaN for a too_few fit.
    c.s("pl_alpha_norm") = too_few(c, "pl_status") ? kNaN : alpha_norm(e, alpha);
    const auto second =
        too_few(c, "pl_status")
            ? XminRunnerUp{}
            : power_law_runner_up(e, static_cast<std::size_t>(std::max(c.config.min_fit_size, 2)));
    c.s("pl_alpha_xmin2") = second.alpha;
    c.s("pl_ks_gap") = second.ks_gap;
    c.s("pl_n_tail_xmin2") = second.n_tail > 0 ? static_cast<double>(second.n_tail) : kNaN;
}

template <typename T>
void truncated_power_law_kernel(Context<T>& c) {
    const auto& e = c.v("esd");
    store_fit(c, "tpl", fit_truncated_power_law(e), true, true);
    c.s("tpl_scale") = e.empty() ? kNaN : e.back() * c.s("tpl_lambda");
    c.s("tpl_alpha_norm") = too_few(c, "tpl_status") ? kNaN : alpha_norm(e, c.s("tpl_alpha"));
}

template <typename T>
void exponential_kernel(Context<T>& c) {
    const auto& e = c.v("esd");
    store_fit(c, "expon", fit_exponential(e), true, false);
    c.s("expon_scale") = e.empty() ? kNaN : e.back() * c.s("expon_lambda");
}

template <typename T>
void pl_alpha_ci_kernel(Context<T>& c) {
    const auto& e = c.v("esd");
    const auto& cfg = c.config;
    const auto f = fit_power_law(e);
    const bool reported = tail_fit_status(f, false, true, cfg.min_fit_size) != FitStatus::too_few;
    const auto ci = reported
                        ? power_law_alpha_ci(e, cfg.alpha_ci_draws, cfg.alpha_ci_seed, 0.95, c.input.on_draw)
                        : AlphaInterval{};
    c.s("pl_alpha_ci_low") = ci.low;
    c.s("pl_alpha_ci_high") = ci.high;
}

// The bootstrap goodness-of-fit p-value of one tail family (0 power law, 1 truncated, 2 exponential).
template <typename T>
void p_value_kernel(Context<T>& c, int family, const std::string& field) {
    const auto& e = c.v("esd");
    const auto& cfg = c.config;
    const TailFit f =
        family == 0 ? fit_power_law(e) : (family == 1 ? fit_truncated_power_law(e) : fit_exponential(e));
    // A fit not reported (too_few) has no p-value either.
    const bool reported = f.n_tail > 0 && f.n_tail >= static_cast<std::size_t>(std::max(cfg.min_fit_size, 0));
    c.s(field) = reported
                     ? tail_p_value(f, e, family, cfg.p_value_bootstraps, cfg.p_value_seed, c.input.on_draw)
                     : kNaN;
}

template <typename T>
void w1_rand_kernel(Context<T>& c) {
    const auto& e = c.v("esd");
    const double mean =
        e.empty() ? 0 : std::accumulate(e.begin(), e.end(), 0.0) / static_cast<double>(e.size());
    auto w1 = [&](const std::vector<double>& rand_esd) {
        return mean <= 0 ? 0.0 : wasserstein1(e, rand_esd) / mean;
    };
    c.s("w1_rand_distance") = w1(c.v("esd_rand"));
    summarise_null(c, "w1_rand_distance",
                   [&](const auto& v) { return w1(squared_over(v, c.s("greater_dim"))); });
}

template <typename T>
using KernelRun = void (*)(Context<T>&);

// A kernel: the fields it reads and produces, and its implementation for f32 and f64 entries. The
// table is the one place that ties a field's name to the code that computes it.
struct Kernel {
    std::string_view name;
    std::vector<std::string_view> inputs;   // fields this kernel reads
    std::vector<std::string_view> outputs;  // fields it produces
    KernelRun<float> run_f32;
    KernelRun<double> run_f64;
    // Resampling draws per matrix (progress and cost estimates): the option that sets them, if any.
    int KernelConfig::*draws = nullptr;

    // `run` is a captureless generic lambda: it converts to the implementation for either precision.
    template <typename Run>
    Kernel(std::string_view name, std::vector<std::string_view> inputs, std::vector<std::string_view> outputs,
           Run run, int KernelConfig::*draws = nullptr)
        : name(name),
          inputs(std::move(inputs)),
          outputs(std::move(outputs)),
          run_f32(run),
          run_f64(run),
          draws(draws) {}

    template <typename T>
    void run(Context<T>& c) const {
        if constexpr (std::is_same_v<T, float>)
            run_f32(c);
        else
            run_f64(c);
    }
};

// Kernels in dependency order: a kernel only reads fields produced by kernels above it.
const std::vector<Kernel>& kernels() {
    static const std::vector<Kernel> k = {
        {"shape", {}, {"greater_dim", "lower_dim", "aspect_ratio"}, [](auto& c) { shape_kernel(c); }},
        {"weights_std", {}, {"weights_std"}, [](auto& c) { weights_std_kernel(c); }},
        {"svd", {}, {"weights_svals", "weights_lsvs", "weights_rsvs"}, [](auto& c) { svd_kernel(c); }},
        {"rand_svd", {}, {"weights_rand_svals"}, [](auto& c) { rand_svd_kernel(c); }},
        {"esd",
         {"weights_svals", "greater_dim"},
         {"esd", "esd_max", "esd_min", "max_weights_sval", "min_weights_sval"},
         [](auto& c) { esd_kernel(c, false); }},
        {"esd_rand",
         {"weights_rand_svals", "greater_dim"},
         {"esd_rand", "esd_rand_max", "esd_rand_min", "max_weights_rand_sval", "min_weights_rand_sval",
          "esd_rand_max_null_std", "esd_rand_min_null_std", "max_weights_rand_sval_null_std",
          "min_weights_rand_sval_null_std"},
         [](auto& c) { esd_kernel(c, true); }},
        {"norms",
         {"weights_svals"},
         {"frob_norm", "nuclear_norm", "l2_norm", "stable_rank", "effective_rank"},
         [](auto& c) { norms_kernel(c); }},
        {"hard_rank", {"esd"}, {"hard_rank"}, [](auto& c) { hard_rank_kernel(c); }},
        {"marchenko_pastur",
         {"esd", "esd_rand", "weights_std", "aspect_ratio", "lower_dim", "greater_dim"},
         {"mp_esd_max", "mp_esd_min", "mp_bulk_std", "mp_sval_max", "mp_ks", "mp_concentration",
          "mp_presence", "mp_num_spikes", "mp_soft_rank", "mp_n_bulk", "mp_status"},
         [](auto& c) { marchenko_pastur_kernel(c); }},
        {"tracy_widom",
         {"esd", "mp_bulk_std", "greater_dim", "lower_dim"},
         {"tw_esd_bound", "tw_num_spikes"},
         [](auto& c) { tracy_widom_kernel(c); }},
        {"power_law",
         {"esd"},
         {"pl_alpha", "pl_esd_xmin", "pl_ks", "pl_concentration", "pl_presence", "pl_alpha_weighted",
          "pl_alpha_norm", "pl_n_tail", "pl_status", "pl_alpha_xmin2", "pl_n_tail_xmin2", "pl_ks_gap"},
         [](auto& c) { power_law_kernel(c); }},
        {"truncated_power_law",
         {"esd"},
         {"tpl_alpha", "tpl_lambda", "tpl_esd_xmin", "tpl_ks", "tpl_concentration", "tpl_presence",
          "tpl_scale", "tpl_alpha_norm", "tpl_n_tail", "tpl_status"},
         [](auto& c) { truncated_power_law_kernel(c); }},
        {"exponential",
         {"esd"},
         {"expon_lambda", "expon_esd_xmin", "expon_ks", "expon_concentration", "expon_presence",
          "expon_scale", "expon_n_tail", "expon_status"},
         [](auto& c) { exponential_kernel(c); }},
        {"pl_alpha_ci",
         {"esd"},
         {"pl_alpha_ci_low", "pl_alpha_ci_high"},
         [](auto& c) { pl_alpha_ci_kernel(c); },
         &KernelConfig::alpha_ci_draws},
        {"pl_p_value",
         {"esd"},
         {"pl_p_value"},
         [](auto& c) { p_value_kernel(c, 0, "pl_p_value"); },
         &KernelConfig::p_value_bootstraps},
        {"tpl_p_value",
         {"esd"},
         {"tpl_p_value"},
         [](auto& c) { p_value_kernel(c, 1, "tpl_p_value"); },
         &KernelConfig::p_value_bootstraps},
        {"expon_p_value",
         {"esd"},
         {"expon_p_value"},
         [](auto& c) { p_value_kernel(c, 2, "expon_p_value"); },
         &KernelConfig::p_value_bootstraps},
        {"w1_rand",
         {"esd", "esd_rand"},
         {"w1_rand_distance", "w1_rand_distance_null_std"},
         [](auto& c) { w1_rand_kernel(c); }},
    };
    return k;
}

const Kernel* producer_of(std::string_view field) {
    for (const auto& k : kernels())
        if (std::find(k.outputs.begin(), k.outputs.end(), field) != k.outputs.end()) return &k;
    return nullptr;
}

// Marks the kernels needed for `field` (and, recursively, for its inputs).
void require(std::string_view field, std::set<std::string_view>& needed) {
    const Kernel* k = producer_of(field);
    if (!k) throw std::logic_error(fmt::format("no kernel produces field '{}'", field));
    if (!needed.insert(k->name).second) return;
    for (auto in : k->inputs) require(in, needed);
}

std::set<std::string_view> needed_kernels(const std::vector<std::string>& fields) {
    std::set<std::string_view> needed;
    for (const auto& f : fields) require(f, needed);
    return needed;
}

}  // namespace

namespace {

// The work of each kernel that costs more than a pass over a matrix's values, per matrix, as `diffract
// metrics` shows it (measured on real shapes: docs/metrics.md, "What a field costs"). The others cost
// next to nothing against the SVD their inputs need.
std::string_view kernel_cost(std::string_view kernel) {
    static const std::map<std::string_view, std::string_view> costs = {
        {"weights_std", "a pass over the entries"},
        {"svd", "the singular values (one values-only SVD, the Gram route by default)"},
        {"rand_svd",
         "the permutation null: a shuffled copy of the entries and its values-only SVD, per --null-draws "
         "draw (default 1)"},
        {"truncated_power_law", "a Nelder-Mead fit of the truncated power law"},
        {"exponential", "an x_min search with a Nelder-Mead fit at each candidate"},
        {"pl_alpha_ci", "--alpha-ci bootstrap refits of the power law (off by default)"},
        {"pl_p_value",
         "--p-value-draws bootstrap refits of the power law with its x_min search (default 100)"},
        {"tpl_p_value",
         "--p-value-draws bootstrap refits of the truncated power law, each a Nelder-Mead fit (default 100)"},
        {"expon_p_value",
         "--p-value-draws bootstrap refits of the exponential with its x_min search (default 100)"},
    };
    const auto it = costs.find(kernel);
    return it == costs.end() ? std::string_view() : it->second;
}

}  // namespace

std::vector<std::string> field_cost(std::string_view field) {
    if (!producer_of(field)) return {};
    std::vector<std::string> out;
    const bool vectors = field == "weights_lsvs" || field == "weights_rsvs";
    for (const auto& kernel : kernels_for({std::string(field)})) {
        if (kernel == "svd" && vectors) {
            out.emplace_back("a full SVD with its singular vectors (gesdd: several times the values alone)");
            continue;
        }
        if (const auto cost = kernel_cost(kernel); !cost.empty()) out.emplace_back(cost);
    }
    if (out.empty()) out.emplace_back("none beyond reading the shape");
    return out;
}

std::vector<std::string> kernels_for(const std::vector<std::string>& fields) {
    const auto needed = needed_kernels(fields);
    std::vector<std::string> out;
    for (const auto& k : kernels())
        if (needed.count(k.name)) out.emplace_back(k.name);
    return out;
}

std::size_t resampling_draws(const std::vector<std::string>& fields, const KernelConfig& config) {
    std::size_t draws = 0;
    const auto needed = needed_kernels(fields);
    for (const auto& k : kernels())
        if (k.draws && needed.count(k.name)) draws += static_cast<std::size_t>(std::max(config.*k.draws, 0));
    return draws;
}

std::vector<std::string> dependents_of(const std::vector<std::string>& fields) {
    std::set<std::string> out(fields.begin(), fields.end());
    // A kernel's outputs are computed together, so they go together; then follow readers.
    bool grew = true;
    while (grew) {
        grew = false;
        for (const auto& k : kernels()) {
            const bool touched = std::any_of(k.inputs.begin(), k.inputs.end(),
                                             [&](auto f) { return out.count(std::string(f)); }) ||
                                 std::any_of(k.outputs.begin(), k.outputs.end(),
                                             [&](auto f) { return out.count(std::string(f)); });
            if (!touched) continue;
            for (auto f : k.outputs) grew |= out.insert(std::string(f)).second;
        }
    }
    return {out.begin(), out.end()};
}

FieldValues nonfinite_field_values(const std::vector<std::string>& fields, std::int64_t nonfinite) {
    const auto needed = needed_kernels(fields);
    FieldValues out;
    for (const auto& k : kernels()) {
        if (!needed.count(k.name)) continue;
        for (auto f : k.outputs) {
            const auto* info = find_field(f);
            if (info && info->is_vector)
                out.vectors[std::string(f)] = {};
            else
                out.scalars[std::string(f)] = kNaN;
        }
    }
    out.bookkeeping.nonfinite_count = nonfinite;
    return out;
}

namespace {

// The svd kernel's singular vectors: computed only when one of them is asked for.
bool is_singular_vector_field(std::string_view f) { return f == "weights_lsvs" || f == "weights_rsvs"; }

}  // namespace

bool fields_need_vectors(const std::vector<std::string>& fields) {
    return std::any_of(fields.begin(), fields.end(),
                       [](const std::string& f) { return is_singular_vector_field(f); });
}

template <typename T>
FieldValues compute_fields(MatrixInput<T> input, const std::vector<std::string>& fields,
                           const KernelConfig& config, linalg::Backend& backend) {
    const auto needed = needed_kernels(fields);
    Context<T> c{input, config, backend};
    c.want_vectors = fields_need_vectors(fields);
    c.values.bookkeeping.precision_bits = std::is_same_v<T, float> ? 32 : 64;  // svd: 64 on a fallback
    for (const auto& k : kernels()) {
        if (!needed.count(k.name)) continue;
        k.run(c);
        // Every output the table declares is produced (a value may be NaN, never absent): a field no
        // kernel produced is a defect here, not a NaN in a user's table.
        for (auto f : k.outputs) {
            if (!c.want_vectors && is_singular_vector_field(f)) continue;
            if (!c.values.scalars.count(std::string(f)) && !c.values.vectors.count(std::string(f)))
                throw std::logic_error(fmt::format("kernel '{}' did not produce its field '{}'", k.name, f));
        }
    }
    for (const auto& f : fields)
        if (!c.values.scalars.count(f) && !c.values.vectors.count(f))
            throw std::logic_error(fmt::format("field '{}' was asked for but no kernel produced it", f));
    return std::move(c.values);
}

template <typename T>
FieldValues compute_fields(const Matrix<T>& w, const std::vector<std::string>& fields,
                           const KernelConfig& config, linalg::Backend& backend) {
    MatrixInput<T> input;
    input.rows = w.rows, input.cols = w.cols, input.in_memory = &w;
    return compute_fields(std::move(input), fields, config, backend);
}

template FieldValues compute_fields<float>(MatrixInput<float>, const std::vector<std::string>&,
                                           const KernelConfig&, linalg::Backend&);
template FieldValues compute_fields<double>(MatrixInput<double>, const std::vector<std::string>&,
                                            const KernelConfig&, linalg::Backend&);
template FieldValues compute_fields<float>(const Matrix<float>&, const std::vector<std::string>&,
                                           const KernelConfig&, linalg::Backend&);
template FieldValues compute_fields<double>(const Matrix<double>&, const std::vector<std::string>&,
                                            const KernelConfig&, linalg::Backend&);

std::map<std::string, double> model_aggregates(const std::vector<FieldValues>& matrices) {
    auto collect = [&](const char* field) {
        std::vector<double> v;
        for (const auto& m : matrices)
            if (auto it = m.scalars.find(field); it != m.scalars.end()) v.push_back(it->second);
        return v;
    };
    // Log aggregates use measurable matrices only (value > 0 and not NaN); none measurable -> NaN.
    auto log_mean = [](const std::vector<double>& v, double power) {
        double s = 0;
        int n = 0;
        for (double x : v)
            if (x > 0 && !std::isnan(x)) s += power * std::log10(x), ++n;
        return n ? s / n : kNaN;
    };
    auto log_sum = [](const std::vector<double>& v) {
        double s = 0;
        int n = 0;
        for (double x : v)
            if (x > 0 && !std::isnan(x)) s += std::log10(x), ++n;
        return n ? s : kNaN;
    };
    std::map<std::string, double> out;
    const auto frob = collect("frob_norm"), l2 = collect("l2_norm");
    out["log_norm"] = log_mean(frob, 2);
    out["log_spectral_norm"] = log_mean(l2, 2);
    double param = frob.empty() ? kNaN : 0;
    for (double f : frob) param += f * f;
    out["param_norm"] = param;
    out["log_prod_frob_norm"] = log_sum(frob);
    out["log_prod_spectral_norm"] = log_sum(l2);
    out["model_pl_alpha_norm"] = log_mean(collect("pl_alpha_norm"), 1);
    out["model_tpl_alpha_norm"] = log_mean(collect("tpl_alpha_norm"), 1);
    return out;
}

}  // namespace diffract::analysis
