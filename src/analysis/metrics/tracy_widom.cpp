// Tracy-Widom (beta = 1) distribution and the Johnstone soft-edge bound tw_esd_bound (metrics.md).
//
// Why Bornemann's method: F_1(s) is the Fredholm determinant det(I - K_s) of the kernel
// K_s(x, y) = Ai(s + (x + y)/2) / 2 on L^2(0, inf) (Ferrari & Spohn 2005). Gauss-Legendre quadrature of
// the operator converges exponentially (Bornemann, Math. Comp. 79, 2010), is stable for all s (unlike a
// backward Painleve II integration of the Hastings-McLeod solution), and needs only the Airy function.
// 96 nodes on [0, 2(14 - s)] (Ai(14) ~ 1e-16) give ~1e-13 here; a quantile costs ~40 determinants
// and is cached.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <numbers>
#include <utility>
#include <vector>

#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/numbers.hpp"

namespace diffract::analysis {
namespace {

constexpr int kNodes = 96;

// Airy Ai: Maclaurin series for |x| <= 2 (at most ~1 digit of cancellation); Bessel forms beyond
// (libstdc++'s C++17 special functions): Ai(x) = sqrt(x/3) K_{1/3}(z) / pi and
// Ai(-x) = sqrt(x)/2 (J_{1/3}(z) - Y_{1/3}(z) / sqrt 3), z = 2/3 x^{3/2}.
double airy_ai(double x) {
    if (std::fabs(x) <= 2.0) {
        constexpr double c1 = 0.355028053887817239260;  // Ai(0)
        constexpr double c2 = 0.258819403792806798405;  // -Ai'(0)
        const double x3 = x * x * x;
        double f = 1.0, g = x, tf = 1.0, tg = x;
        for (int k = 0; k < 60; ++k) {
            tf *= x3 / ((3.0 * k + 2.0) * (3.0 * k + 3.0));
            tg *= x3 / ((3.0 * k + 3.0) * (3.0 * k + 4.0));
            f += tf;
            g += tg;
            if (std::fabs(tf) < 1e-18 * std::fabs(f) && std::fabs(tg) < 1e-18 * std::fabs(g) + 1e-300) break;
        }
        return c1 * f - c2 * g;
    }
    const double t = std::fabs(x);
    const double z = 2.0 / 3.0 * t * std::sqrt(t);
    if (x > 0.0) {
        if (z > 700.0) return 0.0;
        return std::sqrt(t / 3.0) * std::cyl_bessel_k(1.0 / 3.0, z) / std::numbers::pi;
    }
    return std::sqrt(t) / 2.0 *
           (std::cyl_bessel_j(1.0 / 3.0, z) - std::cyl_neumann(1.0 / 3.0, z) / std::sqrt(3.0));
}

struct GaussLegendre {
    std::array<double, kNodes> x{}, w{};  // on [-1, 1]
    GaussLegendre() {
        const int n = kNodes;
        for (int i = 0; i < (n + 1) / 2; ++i) {
            double z = std::cos(std::numbers::pi * (i + 0.75) / (n + 0.5));
            // P_n(z) by the three-term recurrence, and P_n'(z) from P_n and P_{n-1}.
            auto legendre = [n](double t) {
                double p0 = 1.0, p1 = 0.0;
                for (int k = 1; k <= n; ++k) {
                    const double p2 = p1;
                    p1 = p0;
                    p0 = ((2.0 * k - 1.0) * t * p1 - (k - 1.0) * p2) / k;
                }
                return std::pair{p0, n * (t * p0 - p1) / (t * t - 1.0)};
            };
            for (int it = 0; it < 100; ++it) {
                const auto [p, dp_it] = legendre(z);
                const double dz = p / dp_it;
                z -= dz;
                if (std::fabs(dz) < 1e-16) break;
            }
            const double dp = legendre(z).second;  // the derivative at the converged node
            x[i] = -z;
            x[n - 1 - i] = z;
            w[i] = w[n - 1 - i] = 2.0 / ((1.0 - z * z) * dp * dp);
        }
    }
};

const GaussLegendre& gauss_legendre() {
    static const GaussLegendre gl;
    return gl;
}

// det(A) of a dense n x n row-major matrix by LU with partial pivoting.
double determinant(std::vector<double>& a, int n) {
    double det = 1.0;
    for (int c = 0; c < n; ++c) {
        int piv = c;
        for (int r = c + 1; r < n; ++r)
            if (std::fabs(a[r * n + c]) > std::fabs(a[piv * n + c])) piv = r;
        if (a[piv * n + c] == 0.0) return 0.0;
        if (piv != c) {
            for (int k = 0; k < n; ++k) std::swap(a[c * n + k], a[piv * n + k]);
            det = -det;
        }
        const double d = a[c * n + c];
        det *= d;
        for (int r = c + 1; r < n; ++r) {
            const double f = a[r * n + c] / d;
            if (f == 0.0) continue;
            for (int k = c + 1; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
        }
    }
    return det;
}

}  // namespace

double tracy_widom1_cdf(double s) {
    if (std::isnan(s)) return kNaN;
    if (s < -40.0) return 0.0;
    if (s > 40.0) return 1.0;
    const GaussLegendre& gl = gauss_legendre();
    const double len = 2.0 * (14.0 - std::min(s, 6.0));  // Ai(s + (x + y)/2) < 1e-16 beyond
    std::array<double, kNodes> node{}, sw{};
    for (int i = 0; i < kNodes; ++i) {
        node[i] = 0.5 * len * (gl.x[i] + 1.0);
        sw[i] = std::sqrt(0.5 * len * gl.w[i]);
    }
    std::vector<double> a(static_cast<std::size_t>(kNodes) * kNodes);
    for (int i = 0; i < kNodes; ++i) {
        for (int j = i; j < kNodes; ++j) {
            const double k = 0.5 * airy_ai(s + 0.5 * (node[i] + node[j])) * sw[i] * sw[j];
            a[i * kNodes + j] = a[j * kNodes + i] = (i == j ? 1.0 : 0.0) - k;
        }
    }
    return std::clamp(determinant(a, kNodes), 0.0, 1.0);
}

double tracy_widom1_quantile(double q) {
    if (std::isnan(q)) return kNaN;
    if (q <= 0.0) return -std::numeric_limits<double>::infinity();
    if (q >= 1.0) return std::numeric_limits<double>::infinity();
    static std::mutex mutex;
    static std::map<double, double> cache;
    {
        const std::lock_guard<std::mutex> lock(mutex);
        if (auto it = cache.find(q); it != cache.end()) return it->second;
    }
    // Bracket, then Illinois-modified regula falsi (guaranteed bracketing, superlinear).
    double lo = -4.0, hi = 4.0;
    double flo = tracy_widom1_cdf(lo) - q, fhi = tracy_widom1_cdf(hi) - q;
    while (flo > 0.0 && lo > -40.0) {
        hi = lo, fhi = flo;
        lo -= 4.0;
        flo = tracy_widom1_cdf(lo) - q;
    }
    while (fhi < 0.0 && hi < 40.0) {
        lo = hi, flo = fhi;
        hi += 4.0;
        fhi = tracy_widom1_cdf(hi) - q;
    }
    if (flo > 0.0) return lo;
    if (fhi < 0.0) return hi;
    int side = 0;
    double x = 0.5 * (lo + hi);
    for (int it = 0; it < 200 && hi - lo > 1e-13; ++it) {
        x = (lo * fhi - hi * flo) / (fhi - flo);
        if (!(x > lo && x < hi)) x = 0.5 * (lo + hi);
        const double fx = tracy_widom1_cdf(x) - q;
        if (fx == 0.0) break;
        if ((fx < 0.0) == (flo < 0.0)) {
            lo = x, flo = fx;
            if (side == -1) fhi *= 0.5;
            side = -1;
        } else {
            hi = x, fhi = fx;
            if (side == 1) flo *= 0.5;
            side = 1;
        }
        if (std::fabs(fx) < 1e-15) break;
    }
    const std::lock_guard<std::mutex> lock(mutex);
    cache.emplace(q, x);
    return x;
}

double tw_esd_bound(std::size_t N, std::size_t M, double bulk_std, double p) {
    if (N < 2 || M < 1 || std::isnan(bulk_std) || !(p > 0.0 && p < 1.0)) return kNaN;
    const double n1 = static_cast<double>(N - 1), m = static_cast<double>(M);
    const double a = std::sqrt(n1) + std::sqrt(m);
    const double b = 1.0 / std::sqrt(n1) + 1.0 / std::sqrt(m);
    const double c = bulk_std * bulk_std / static_cast<double>(N);
    const double mu = c * a * a;
    const double s = c * a * std::cbrt(b);
    return mu + s * tracy_widom1_quantile(1.0 - p);
}

}  // namespace diffract::analysis
