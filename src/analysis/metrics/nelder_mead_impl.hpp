// scipy.optimize.fmin ported for the tail fits of power_law.cpp (header: it is a template over the
// objective and the dimension).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "diffract/core/numbers.hpp"

namespace diffract::analysis::nelder_mead_detail {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ----------------------------------------------------------------------------------------------------
// scipy.optimize.fmin (scipy 1.17 _minimize_neldermead, adaptive=False, no bounds, xatol = fatol = 1e-4,
// maxiter = maxfun = 200 N), ported operation for operation so that the simplex path and the returned
// vertex are the ones powerlaw gets.

template <int N>
using Vec = std::array<double, N>;

struct MaxFunReached {};

// numpy.argsort on <= 3 values is an insertion sort (stable), NaN last.
template <int N>
void sort_simplex(std::array<Vec<N>, N + 1>& sim, std::array<double, N + 1>& fsim) {
    auto less = [](double x, double y) { return x < y || (std::isnan(y) && !std::isnan(x)); };
    for (int i = 1; i <= N; ++i) {
        for (int j = i; j > 0 && less(fsim[j], fsim[j - 1]); --j) {
            std::swap(fsim[j], fsim[j - 1]);
            std::swap(sim[j], sim[j - 1]);
        }
    }
}

// max with NaN propagation (numpy.max).
inline double nanmax(double acc, double v) {
    return (std::isnan(acc) || std::isnan(v)) ? kNaN : std::max(acc, v);
}

// `converged` (optional) is set to whether the tolerances held (false: stopped at maxfun or maxiter).
template <int N, class F>
Vec<N> nelder_mead(F&& objective, const Vec<N>& x0, bool* converged = nullptr) {
    constexpr double rho = 1.0, chi = 2.0, psi = 0.5, sigma = 0.5;
    constexpr double xatol = 1e-4, fatol = 1e-4;
    constexpr int maxfun = 200 * N, maxiter = 200 * N;

    std::array<Vec<N>, N + 1> sim{};
    sim[0] = x0;
    for (int k = 0; k < N; ++k) {
        Vec<N> y = x0;
        y[k] = y[k] != 0.0 ? (1.0 + 0.05) * y[k] : 0.00025;
        sim[k + 1] = y;
    }
    std::array<double, N + 1> fsim;
    fsim.fill(kInf);
    int fcalls = 0;
    auto func = [&](const Vec<N>& x) {
        if (fcalls >= maxfun) throw MaxFunReached{};
        ++fcalls;
        return objective(x);
    };
    auto combine = [](double ca, const Vec<N>& a, double cb, const Vec<N>& b) {
        Vec<N> out;
        for (int i = 0; i < N; ++i) out[i] = ca * a[i] + cb * b[i];
        return out;
    };
    try {
        for (int k = 0; k <= N; ++k) fsim[k] = func(sim[k]);
    } catch (const MaxFunReached&) {
    }
    sort_simplex<N>(sim, fsim);

    int iterations = 1;
    if (converged) *converged = false;
    while (fcalls < maxfun && iterations < maxiter) {
        try {
            double dx = 0.0, df = 0.0;
            for (int j = 1; j <= N; ++j) {
                for (int i = 0; i < N; ++i) dx = nanmax(dx, std::fabs(sim[j][i] - sim[0][i]));
                df = nanmax(df, std::fabs(fsim[0] - fsim[j]));
            }
            if (dx <= xatol && df <= fatol) {
                if (converged) *converged = true;
                break;
            }

            Vec<N> xbar = sim[0];
            for (int j = 1; j < N; ++j)
                for (int i = 0; i < N; ++i) xbar[i] += sim[j][i];
            for (int i = 0; i < N; ++i) xbar[i] /= N;

            const Vec<N> xr = combine(1 + rho, xbar, -rho, sim[N]);
            const double fxr = func(xr);
            bool doshrink = false;
            if (fxr < fsim[0]) {
                const Vec<N> xe = combine(1 + rho * chi, xbar, -rho * chi, sim[N]);
                const double fxe = func(xe);
                if (fxe < fxr) {
                    sim[N] = xe;
                    fsim[N] = fxe;
                } else {
                    sim[N] = xr;
                    fsim[N] = fxr;
                }
            } else if (fxr < fsim[N - 1]) {
                sim[N] = xr;
                fsim[N] = fxr;
            } else {
                if (fxr < fsim[N]) {
                    const Vec<N> xc = combine(1 + psi * rho, xbar, -psi * rho, sim[N]);
                    const double fxc = func(xc);
                    if (fxc <= fxr) {
                        sim[N] = xc;
                        fsim[N] = fxc;
                    } else {
                        doshrink = true;
                    }
                } else {
                    const Vec<N> xcc = combine(1 - psi, xbar, psi, sim[N]);
                    const double fxcc = func(xcc);
                    if (fxcc < fsim[N]) {
                        sim[N] = xcc;
                        fsim[N] = fxcc;
                    } else {
                        doshrink = true;
                    }
                }
                if (doshrink) {
                    for (int j = 1; j <= N; ++j) {
                        for (int i = 0; i < N; ++i) sim[j][i] = sim[0][i] + sigma * (sim[j][i] - sim[0][i]);
                        fsim[j] = func(sim[j]);
                    }
                }
            }
            ++iterations;
        } catch (const MaxFunReached&) {
        }
        sort_simplex<N>(sim, fsim);
    }
    return sim[0];
}

}  // namespace diffract::analysis::nelder_mead_detail
