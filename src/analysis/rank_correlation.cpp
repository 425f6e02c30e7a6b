#include "diffract/analysis/rank_correlation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>

#include "diffract/core/numbers.hpp"
#include "diffract/core/random.hpp"

namespace diffract::analysis {
namespace {

void require_pairs(const std::vector<double>& x, const std::vector<double>& y) {
    if (x.size() != y.size()) throw std::logic_error("rank correlation: x and y differ in length");
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
    const auto n = static_cast<double>(x.size());
    const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n,
                 my = std::accumulate(y.begin(), y.end(), 0.0) / n;
    double sxy = 0, sxx = 0, syy = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    return sxx == 0 || syy == 0 ? kNaN : sxy / std::sqrt(sxx * syy);
}

int sign(double v) { return (v > 0) - (v < 0); }

}  // namespace

std::vector<double> average_ranks(const std::vector<double>& x) {
    std::vector<std::size_t> order(x.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
    std::vector<double> ranks(x.size());
    for (std::size_t i = 0; i < order.size();) {
        std::size_t j = i;
        while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
        const double mean_rank = (static_cast<double>(i) + static_cast<double>(j)) / 2 + 1;
        for (std::size_t k = i; k <= j; ++k) ranks[order[k]] = mean_rank;
        i = j + 1;
    }
    return ranks;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
    require_pairs(x, y);
    if (x.size() < 2) return kNaN;
    return pearson(average_ranks(x), average_ranks(y));
}

// tau-b = (C − D) / sqrt((n0 − n1)(n0 − n2)): n0 = n(n − 1)/2 pairs, n1 and n2 the pairs tied in x and
// in y. O(n²): the heads of a model are thousands at most.
double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y) {
    require_pairs(x, y);
    const std::size_t n = x.size();
    if (n < 2) return kNaN;
    double concordant_minus_discordant = 0, tied_x = 0, tied_y = 0;
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = i + 1; j < n; ++j) {
            const int sx = sign(x[i] - x[j]), sy = sign(y[i] - y[j]);
            tied_x += sx == 0;
            tied_y += sy == 0;
            concordant_minus_discordant += sx * sy;
        }
    const double pairs = static_cast<double>(n) * static_cast<double>(n - 1) / 2;
    const double denominator = std::sqrt((pairs - tied_x) * (pairs - tied_y));
    return denominator == 0 ? kNaN : concordant_minus_discordant / denominator;
}

Interval bootstrap_interval(const std::vector<double>& x, const std::vector<double>& y,
                            PairStatistic statistic, int draws, std::uint64_t seed, double level) {
    require_pairs(x, y);
    const std::size_t n = x.size();
    std::vector<double> values;
    if (n >= 2) {
        std::uint64_t state = stream_seed(seed, "pair-bootstrap");
        std::vector<double> bx(n), by(n);
        for (int d = 0; d < draws; ++d) {
            for (std::size_t i = 0; i < n; ++i) {
                const auto k = splitmix64(state) % n;
                bx[i] = x[k], by[i] = y[k];
            }
            const double v = statistic(bx, by);
            if (std::isfinite(v)) values.push_back(v);
        }
    }
    if (values.empty()) return {kNaN, kNaN, 0};
    std::sort(values.begin(), values.end());
    const double a = (1 - level) / 2, last = static_cast<double>(values.size() - 1);
    return {values[static_cast<std::size_t>(std::floor(a * last))],
            values[static_cast<std::size_t>(std::ceil((1 - a) * last))], static_cast<int>(values.size())};
}

double permutation_p_value(const std::vector<double>& x, const std::vector<double>& y,
                           PairStatistic statistic, int draws, std::uint64_t seed) {
    require_pairs(x, y);
    const double observed = statistic(x, y);
    if (!std::isfinite(observed)) return kNaN;
    std::uint64_t state = stream_seed(seed, "pair-permutation");
    std::vector<double> py = y;
    int at_least = 0;
    for (int d = 0; d < draws; ++d) {
        shuffle(std::span<double>(py), state);
        const double v = statistic(x, py);
        at_least += std::isfinite(v) && v >= observed - 1e-12 * std::abs(observed);
    }
    return (1.0 + at_least) / (1.0 + draws);
}

}  // namespace diffract::analysis
