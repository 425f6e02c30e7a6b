// The log of the upper incomplete gamma function Gamma(a, z) for the truncated power law's normalisation,
// accurate for the negative a (= 1 - alpha) the fits use, where std:: offers nothing.
#include <array>
#include <cmath>
#include <limits>

#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/numbers.hpp"

namespace diffract::analysis {
namespace {

// ----------------------------------------------------------------------------------------------------
// Upper incomplete gamma, log-scaled: R(a, z) = Gamma(a, z) e^z z^-a.

// Taylor coefficients of 1 / Gamma(1 + x) = sum c_k x^k, k >= 1 (c_0 = 1), from mpmath at 40 digits.
constexpr std::array<double, 30> kRecipGamma1p = {
    0.57721566490153286061,     -0.65587807152025388108,     -0.042002635034095235529,
    0.1665386113822914895,      -0.042197734555544336748,    -0.0096219715278769735621,
    0.0072189432466630995424,   -0.0011651675918590651121,   -0.00021524167411495097282,
    0.00012805028238811618615,  -0.000020134854780788238656, -1.2504934821426706573e-6,
    1.1330272319816958824e-6,   -2.0563384169776071035e-7,   6.1160951044814158179e-9,
    5.0020076444692229301e-9,   -1.1812745704870201446e-9,   1.0434267116911005105e-10,
    7.782263439905071254e-12,   -3.6968056186422057082e-12,  5.100370287454475979e-13,
    -2.0583260535665067832e-14, -5.3481225394230179824e-15,  1.2267786282382607902e-15,
    -1.1812593016974587695e-16, 1.1866922547516003326e-18,   1.4123806553180317816e-18,
    -2.2987456844353702066e-19, 1.7144063219273374334e-20,   1.3373517304936931149e-22};

// R(a, z) by the modified Lentz continued fraction (Numerical Recipes' gcf); good for z >= 1, a < 1.
double gamma_upper_scaled_cf(double a, double z) {
    constexpr double kFpMin = 1e-300;
    double b = z + 1.0 - a;
    double c = 1.0 / kFpMin;
    double d = 1.0 / b;
    double h = d;
    for (int i = 1; i < 10000; ++i) {
        const double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (std::fabs(d) < kFpMin) d = kFpMin;
        c = b + an / c;
        if (std::fabs(c) < kFpMin) c = kFpMin;
        d = 1.0 / d;
        const double del = d * c;
        h *= del;
        if (std::fabs(del - 1.0) < 1e-16) break;
    }
    return h;
}

// Gamma(a0, z) for a0 in (-1/2, 1), 0 < z < 1.
double gamma_upper_small_z(double a0, double z) {
    // tail = sum_{k>=1} (-z)^k / (k! (a0 + k)); alternating, |z| < 1, converges fast.
    double tail = 0.0;
    double term = 1.0;
    for (int k = 1; k < 200; ++k) {
        term *= -z / k;
        const double add = term / (a0 + k);
        tail += add;
        if (std::fabs(add) < 1e-17 * std::fabs(tail)) break;
    }
    const double za = std::pow(z, a0);
    if (a0 >= 0.5) return std::tgamma(a0) - za * (1.0 / a0 + tail);
    // Temme (a0 in (-1/2, 1/2)): Gamma(a0, z) = (Gamma(1 + a0) - z^a0) / a0 - z^a0 tail, the first term split
    // as (Gamma(1 + a0) - 1) / a0 - (z^a0 - 1) / a0 with both pieces computed without cancellation.
    double p = 0.0;  // 1 / Gamma(1 + x) = 1 + x p(x)
    for (std::size_t k = kRecipGamma1p.size(); k-- > 0;) p = p * a0 + kRecipGamma1p[k];
    const double g1p = 1.0 / (1.0 + a0 * p);  // Gamma(1 + a0)
    const double g = -p * g1p;                // (Gamma(1 + a0) - 1) / a0
    const double e = a0 != 0.0 ? std::expm1(a0 * std::log(z)) / a0 : std::log(z);
    return (g - e) - za * tail;
}

}  // namespace

double log_upper_incomplete_gamma(double a, double z) {
    if (!(z > 0.0) || std::isnan(a) || std::isinf(z) || std::isinf(a)) return kNaN;
    double log_r;
    if ((a < 1.0 && z >= 1.0) || (a >= 1.0 && z > a + 1.0)) {
        log_r = std::log(gamma_upper_scaled_cf(a, z));
    } else if (a >= 1.0) {
        // a >= 1, z <= a + 1: Gamma(a) - gamma(a, z), the lower part by its series (not used by the fits,
        // whose a = 1 - alpha < 0; kept so that the function is total).
        double sum = 1.0 / a, term = 1.0 / a;
        for (int k = 1; k < 1000; ++k) {
            term *= z / (a + k);
            sum += term;
            if (term < 1e-17 * sum) break;
        }
        const double lower = std::exp(a * std::log(z) - z) * sum;
        return std::log(std::tgamma(a) - lower);
    } else {
        // z < 1, a < 1: start at a0 = a + m in (-1/2, 1/2] (or a itself in (1/2, 1)), recur down m times.
        // Starting near 1 instead would cancel badly: R(1, z) = 1/z makes z R - 1 vanish.
        const double m = a < 0.0 ? std::floor(-a + 0.5) : 0.0;
        const double a0 = a + m;
        const double g0 = gamma_upper_small_z(a0, z);
        double r = g0 * std::exp(z - a0 * std::log(z));
        double b = a0;
        for (int k = 0; k < static_cast<int>(m); ++k) {
            r = (z * r - 1.0) / (b - 1.0);
            b -= 1.0;
        }
        log_r = std::log(r);
    }
    return a * std::log(z) - z + log_r;
}

}  // namespace diffract::analysis
