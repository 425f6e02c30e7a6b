// Gaussian test matrices shared by the unit tests (deterministic per seed).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

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

// rows × cols (rows ≥ cols) with orthonormal columns: a Gaussian matrix through modified Gram-Schmidt,
// twice (orthonormal to ~ε).
inline Matrix<double> orthonormal_columns(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    auto q = random_matrix(rows, cols, seed);
    for (int pass = 0; pass < 2; ++pass)
        for (std::int64_t c = 0; c < cols; ++c) {
            for (std::int64_t p = 0; p < c; ++p) {
                double d = 0;
                for (std::int64_t i = 0; i < rows; ++i) d += q(i, p) * q(i, c);
                for (std::int64_t i = 0; i < rows; ++i) q(i, c) -= d * q(i, p);
            }
            double n = 0;
            for (std::int64_t i = 0; i < rows; ++i) n += q(i, c) * q(i, c);
            n = std::sqrt(n);
            for (std::int64_t i = 0; i < rows; ++i) q(i, c) /= n;
        }
    return q;
}

// W = U diag(s) Vᵀ with random orthonormal U (rows × k) and V (cols × k), k = min(rows, cols), s given
// (min(rows, cols) values): a matrix with a planted spectrum and known singular vectors.
struct PlantedSvd {
    Matrix<double> w, u, v;
};
inline PlantedSvd planted_svd(std::int64_t rows, std::int64_t cols, const std::vector<double>& s,
                              std::uint64_t seed) {
    const auto k = rows < cols ? rows : cols;
    PlantedSvd out{Matrix<double>(rows, cols), orthonormal_columns(rows, k, seed),
                   orthonormal_columns(cols, k, seed + 1)};
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            double x = 0;
            for (std::int64_t c = 0; c < k; ++c)
                x += out.u(i, c) * s[static_cast<std::size_t>(c)] * out.v(j, c);
            out.w(i, j) = x;
        }
    return out;
}

}  // namespace diffract::test_data
