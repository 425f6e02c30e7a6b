// Rank statistics for validating a head ranking against what rewinding the heads did: Spearman's rho
// (the Pearson correlation of average ranks, ties averaged: scipy.stats.spearmanr), Kendall's tau-b
// (scipy.stats.kendalltau's default), a percentile bootstrap interval over the (x, y) pairs and a
// one-sided permutation p-value. Pairs holding a NaN are left out by the caller.
#pragma once

#include <cstdint>
#include <vector>

namespace diffract::analysis {

// The ranks 1..n of x, ties given the mean of their ranks.
std::vector<double> average_ranks(const std::vector<double>& x);

// NaN when fewer than two pairs or either side is constant.
double spearman(const std::vector<double>& x, const std::vector<double>& y);
double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y);

using PairStatistic = double (*)(const std::vector<double>&, const std::vector<double>&);

struct Interval {
    double low, high;
    int draws;  // resamples whose statistic was defined (a resample of one distinct pair has none)
};

// The percentile interval at `level` of `statistic` over `draws` resamples of the pairs with
// replacement (seeded): the sorted values at floor(a (M − 1)) and ceil((1 − a) (M − 1)), a = (1 − level)/2.
Interval bootstrap_interval(const std::vector<double>& x, const std::vector<double>& y,
                            PairStatistic statistic, int draws, std::uint64_t seed, double level = 0.95);

// P(statistic(x, π(y)) ≥ statistic(x, y)) over `draws` seeded permutations π of y, as (1 + #) / (1 + draws):
// the chance that pairs matched at random do at least as well. Its smallest value is 1 / (1 + draws).
double permutation_p_value(const std::vector<double>& x, const std::vector<double>& y,
                           PairStatistic statistic, int draws, std::uint64_t seed);

}  // namespace diffract::analysis
