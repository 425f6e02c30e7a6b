// Draws from the fitted tail distributions for the bootstrap p-values (tail_p_value).
#pragma once

#include <cmath>

namespace diffract::analysis {

// One draw of the truncated power law p(x) ∝ x^-α e^(-λx) on [x_min, ∞) (α > 1, λ > 0), by rejection
// from the proposal that accepts more often. Both are exact:
//   Pareto(α) on [x_min, ∞), accepted with e^(-λ(x - x_min));
//   x_min + Exp(λ), accepted with (x / x_min)^-α (powerlaw's only proposal).
// With Z = ∫ x^-α e^(-λx) dx their acceptance rates are Z·(α-1)·x_min^(α-1)·e^(λ x_min) and
// Z·λ·x_min^α·e^(λ x_min): the ratio is (α-1) / (λ·x_min). A heavy tail has λ·x_min ≪ α-1, where the
// exponential proposal alone accepts about λ·x_min/(α-1) of its draws (10^6 tries per value at 1e-6:
// `--metrics all` did not finish); the better one accepts a fair fraction either way.
template <typename Rng>
double draw_truncated_power_law(Rng& rng, double x_min, double alpha, double lambda) {
    if (alpha - 1.0 > lambda * x_min) {
        for (;;) {
            const double x = x_min * std::pow(1.0 - rng.uniform(), -1.0 / (alpha - 1.0));
            if (rng.uniform() < std::exp(-lambda * (x - x_min))) return x;
        }
    }
    for (;;) {
        const double x = x_min - std::log(1.0 - rng.uniform()) / lambda;
        if (rng.uniform() < std::pow(x / x_min, -alpha)) return x;
    }
}

}  // namespace diffract::analysis
