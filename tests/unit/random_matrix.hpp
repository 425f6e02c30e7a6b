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

}  // namespace diffract::test_data
