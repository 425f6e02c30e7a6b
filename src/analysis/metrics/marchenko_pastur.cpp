// Marchenko-Pastur bulk fit, its CDF and the windowed KS distance mp_ks (metrics.md).
//
// Why a closed-form CDF: mp_ks evaluates it at every bulk eigenvalue of thousands of matrices, so numeric
// integration of the density would dominate; the antiderivative of sqrt((b - x)(x - a)) / x is elementary.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/numbers.hpp"

namespace diffract::analysis {
namespace {
constexpr double kEps = 1e-16;
}  // namespace

MarchenkoPasturFit fit_marchenko_pastur(std::span<const double> esd, std::span<const double> esd_rand,
                                        double weights_std, double aspect_ratio_Q, std::size_t M) {
    MarchenkoPasturFit fit;
    if (esd.empty() || !(aspect_ratio_Q > 0.0) || !std::isfinite(weights_std) || M == 0) return fit;
    double esd_max = -std::numeric_limits<double>::infinity();
    for (double v : esd) {
        if (std::isnan(v)) return fit;
        esd_max = std::max(esd_max, v);
    }
    const double inv_sqrt_q = 1.0 / std::sqrt(aspect_ratio_Q);
    double s2 = weights_std * weights_std;
    const double lambda_plus0 = s2 * (1.0 + inv_sqrt_q) * (1.0 + inv_sqrt_q);
    double lambda_plus = lambda_plus0;
    const bool exceeds =
        std::any_of(esd_rand.begin(), esd_rand.end(), [&](double v) { return v > lambda_plus0; });
    if (exceeds) {
        // Re-estimate the bulk variance from the permutation null's eigenvalues inside the first edge.
        double sum = 0.0;
        for (double v : esd_rand)
            if (v <= lambda_plus0) sum += v;
        s2 = sum / static_cast<double>(M);
        lambda_plus = s2 * (1.0 + inv_sqrt_q) * (1.0 + inv_sqrt_q);
    }
    fit.esd_max = std::min(lambda_plus, esd_max);
    fit.bulk_std = std::sqrt(s2);
    fit.esd_min = s2 * (1.0 - inv_sqrt_q) * (1.0 - inv_sqrt_q);
    return fit;
}

double marchenko_pastur_cdf(double x, double ratio, double sigma) {
    if (std::isnan(x) || !(ratio > 0.0 && ratio <= 1.0) || !(sigma > 0.0) || !std::isfinite(sigma))
        return kNaN;
    const double s2 = sigma * sigma;
    const double sy = std::sqrt(ratio);
    const double a = s2 * (1.0 - sy) * (1.0 - sy);
    const double b = s2 * (1.0 + sy) * (1.0 + sy);
    if (x <= a) return 0.0;
    if (x >= b) return 1.0;
    // Antiderivative of sqrt((b - x)(x - a)) / x:
    //   R + (a + b)/2 asin((2x - a - b)/(b - a)) - sqrt(ab) asin(((a + b) x - 2ab) / ((b - a) x)),
    // both arcsines equal to -1 at x = a and +1 at x = b; the total mass is 2 pi sigma^2 y.
    const double r = std::sqrt((b - x) * (x - a));
    const double u = std::clamp((2.0 * x - a - b) / (b - a), -1.0, 1.0);
    const double v = std::clamp(((a + b) * x - 2.0 * a * b) / ((b - a) * x), -1.0, 1.0);
    const double half_pi = std::numbers::pi / 2.0;
    const double integral =
        r + 0.5 * (a + b) * (std::asin(u) + half_pi) - std::sqrt(a * b) * (std::asin(v) + half_pi);
    return std::clamp(integral / (2.0 * std::numbers::pi * s2 * ratio), 0.0, 1.0);
}

double mp_ks_distance(std::span<const double> esd, const MarchenkoPasturFit& fit, double Q) {
    if (std::isnan(fit.esd_max) || std::isnan(fit.esd_min) || std::isnan(fit.bulk_std) || !(Q > 0.0))
        return kNaN;
    std::vector<double> inside;
    for (double v : esd)
        if (v > fit.esd_min && v < fit.esd_max) inside.push_back(v);
    if (inside.empty()) return 1.0;
    std::sort(inside.begin(), inside.end());
    const double ratio = 1.0 / (Q + 1e-8);
    const double f_lo = marchenko_pastur_cdf(fit.esd_min, ratio, fit.bulk_std);
    const double f_hi = marchenko_pastur_cdf(fit.esd_max, ratio, fit.bulk_std);
    const double mass = f_hi - f_lo;
    if (!(mass > kEps)) return 1.0;
    const double n = static_cast<double>(inside.size());
    double d = 0.0;
    for (std::size_t i = 0; i < inside.size(); ++i) {
        const double fc = (marchenko_pastur_cdf(inside[i], ratio, fit.bulk_std) - f_lo) / mass;
        const double k = static_cast<double>(i);
        d = std::max({d, (k + 1.0) / n - fc, fc - k / n});
    }
    return d;
}

}  // namespace diffract::analysis
