// Gaussian test matrices shared by the unit tests (deterministic per seed).
#pragma once

#include <cstdint>
#include <random>

#include "diffract/core/matrix.hpp"

namespace diffract::test_data {

inline Matrix<double> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> n(0.0, 1.0);
    Matrix<double> m(rows, cols);
    for (auto& v : m.data) v = n(rng);
    return m;
}

// A rows × cols matrix of rank 2 (A·B with Gaussian A, B): its Gram spectrum is ill-conditioned
// beyond any guard once stored in a floating format.
inline Matrix<double> rank2_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    const auto a = random_matrix(rows, 2, seed), b = random_matrix(2, cols, seed + 1);
    Matrix<double> w(rows, cols);
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) w(i, j) = a(i, 0) * b(0, j) + a(i, 1) * b(1, j);
    return w;
}

}  // namespace diffract::test_data
