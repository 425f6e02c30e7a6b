// weights_std, the population standard deviation of the entries, is summed pairwise (as numpy sums):
// on 4M entries around an offset mean it is within 2e-15 of a compensated long-double two-pass
// reference, where one running sum over the entries errs by 1e-14 to 1e-13.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "diffract/analysis/catalog.hpp"
#include "diffract/linalg/backend.hpp"

using namespace diffract;

namespace {

// Neumaier's compensated sum in long double.
template <typename F>
long double compensated_sum(const std::vector<float>& x, F f) {
    long double sum = 0, carry = 0;
    for (float v : x) {
        const long double term = f(static_cast<long double>(v)), next = sum + term;
        carry += std::fabs(sum) >= std::fabs(term) ? (sum - next) + term : (term - next) + sum;
        sum = next;
    }
    return sum + carry;
}

}  // namespace

TEST(WeightsStd, IsThePopulationStdToAFewUlpsOnMillionsOfEntries) {
    for (const std::int64_t rows : {2048, 2047}) {  // a length that is not a multiple of the block
        Matrix<float> w(rows, 2048);
        std::mt19937_64 rng(static_cast<std::uint64_t>(rows));
        std::normal_distribution<float> entry(3.0f, 0.01f);
        for (auto& v : w.data) v = entry(rng);
        const std::vector<float> x(w.data.begin(), w.data.end());
        const auto n = static_cast<long double>(x.size());
        const long double mean = compensated_sum(x, [](long double v) { return v; }) / n;
        const auto reference = static_cast<double>(
            std::sqrt(compensated_sum(x, [mean](long double v) { return (v - mean) * (v - mean); }) / n));

        auto backend = linalg::make_backend("cpu");
        const auto got = analysis::compute_fields(w, analysis::resolve_metrics("weights_std"),
                                                  analysis::KernelConfig{}, *backend);
        EXPECT_NEAR(got.scalars.at("weights_std"), reference, 2e-15 * reference) << rows;
    }
}
