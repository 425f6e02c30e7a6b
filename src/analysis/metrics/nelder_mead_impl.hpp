// scipy.optimize.fmin ported for the tail fits of power_law.cpp (header: it is a template over the
// objective and the dimension).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
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

// The simplex of one minimisation and the objective's calls, counted against maxfun: a call past it
// throws MaxFunReached, which ends the iteration in progress (scipy's
// _wrap_scalar_function_maxfun_validation).
template <int N, class F>
class Simplex {
public:
    static constexpr double rho = 1.0, chi = 2.0, psi = 0.5, sigma = 0.5;
    static constexpr double xatol = 1e-4, fatol = 1e-4;
    static constexpr int maxfun = 200 * N;

    // x0 and, for each coordinate, x0 with that coordinate 5 % larger (0.00025 where it is 0).
    Simplex(F& objective, const Vec<N>& x0) : objective_(objective) {
        sim_[0] = x0;
        for (int k = 0; k < N; ++k) {
            Vec<N> y = x0;
            y[k] = y[k] != 0.0 ? (1.0 + 0.05) * y[k] : 0.00025;
            sim_[k + 1] = y;
        }
        fsim_.fill(kInf);
    }

    // The objective at every vertex (as many as maxfun allows), then the vertices sorted.
    void evaluate() {
        try {
            for (int k = 0; k <= N; ++k) fsim_[k] = call(sim_[k]);
        } catch (const MaxFunReached&) {
        }
        sort();
    }

    void sort() { sort_simplex<N>(sim_, fsim_); }
    bool calls_left() const { return fcalls_ < maxfun; }
    const Vec<N>& best() const { return sim_[0]; }

    // Whether every vertex lies within xatol of the best one and every value within fatol of its value.
    bool within_tolerance() const {
        double dx = 0.0, df = 0.0;
        for (int j = 1; j <= N; ++j) {
            for (int i = 0; i < N; ++i) dx = nanmax(dx, std::fabs(sim_[j][i] - sim_[0][i]));
            df = nanmax(df, std::fabs(fsim_[0] - fsim_[j]));
        }
        return dx <= xatol && df <= fatol;
    }

    // One iteration: the worst vertex reflected through the centroid of the others, then expanded,
    // kept, or contracted (outside or inside), and the simplex shrunk towards the best vertex when no
    // contraction improves on it. The vertices are left unsorted.
    void step() {
        const Vec<N> xbar = centroid();
        const Vec<N> xr = combine(1 + rho, xbar, -rho, sim_[N]);
        const double fxr = call(xr);
        if (fxr < fsim_[0]) {
            const Vec<N> xe = combine(1 + rho * chi, xbar, -rho * chi, sim_[N]);
            const double fxe = call(xe);
            if (fxe < fxr)
                replace_worst(xe, fxe);
            else
                replace_worst(xr, fxr);
        } else if (fxr < fsim_[N - 1]) {
            replace_worst(xr, fxr);
        } else if (!contract(xbar, fxr)) {
            shrink();
        }
    }

private:
    double call(const Vec<N>& x) {
        if (fcalls_ >= maxfun) throw MaxFunReached{};
        ++fcalls_;
        return objective_(x);
    }

    static Vec<N> combine(double ca, const Vec<N>& a, double cb, const Vec<N>& b) {
        Vec<N> out;
        for (int i = 0; i < N; ++i) out[i] = ca * a[i] + cb * b[i];
        return out;
    }

    // The mean of every vertex but the worst, summed in vertex order.
    Vec<N> centroid() const {
        Vec<N> xbar = sim_[0];
        for (int j = 1; j < N; ++j)
            for (int i = 0; i < N; ++i) xbar[i] += sim_[j][i];
        for (int i = 0; i < N; ++i) xbar[i] /= N;
        return xbar;
    }

    void replace_worst(const Vec<N>& x, double f) {
        sim_[N] = x;
        fsim_[N] = f;
    }

    // The outside contraction when the reflection beat the worst vertex, else the inside one; whether
    // it was kept.
    bool contract(const Vec<N>& xbar, double fxr) {
        if (fxr < fsim_[N]) {
            const Vec<N> xc = combine(1 + psi * rho, xbar, -psi * rho, sim_[N]);
            const double fxc = call(xc);
            if (!(fxc <= fxr)) return false;  // NaN shrinks, as in scipy
            replace_worst(xc, fxc);
            return true;
        }
        const Vec<N> xcc = combine(1 - psi, xbar, psi, sim_[N]);
        const double fxcc = call(xcc);
        if (!(fxcc < fsim_[N])) return false;
        replace_worst(xcc, fxcc);
        return true;
    }

    void shrink() {
        for (int j = 1; j <= N; ++j) {
            for (int i = 0; i < N; ++i) sim_[j][i] = sim_[0][i] + sigma * (sim_[j][i] - sim_[0][i]);
            fsim_[j] = call(sim_[j]);
        }
    }

    F& objective_;
    std::array<Vec<N>, N + 1> sim_{};
    std::array<double, N + 1> fsim_;
    int fcalls_ = 0;
};

// `converged` (optional) is set to whether the tolerances held (false: stopped at maxfun or maxiter).
template <int N, class F>
Vec<N> nelder_mead(F&& objective, const Vec<N>& x0, bool* converged = nullptr) {
    constexpr int maxiter = 200 * N;
    using Objective = std::remove_reference_t<F>;
    Simplex<N, Objective> s(objective, x0);
    s.evaluate();
    int iterations = 1;
    if (converged) *converged = false;
    while (s.calls_left() && iterations < maxiter) {
        try {
            if (s.within_tolerance()) {
                if (converged) *converged = true;
                break;
            }
            s.step();
            ++iterations;
        } catch (const MaxFunReached&) {
        }
        s.sort();
    }
    return s.best();
}

}  // namespace diffract::analysis::nelder_mead_detail
