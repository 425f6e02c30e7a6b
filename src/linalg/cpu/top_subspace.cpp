// A top singular subspace's LAPACK work on the CPU: the Gram product (Backend::gram) and its few largest
// eigenpairs (Backend::top_symmetric_eigen).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "block_values_impl.hpp"
#include "diffract/core/nonfinite.hpp"
#include "lapack_impl.hpp"

namespace diffract::linalg::cpu {

std::vector<double> gram(std::span<const double> a, bool transpose, std::int64_t n64, std::int64_t depth64) {
    const int n = lapack::checked_int(n64, "dimension"), depth = lapack::checked_int(depth64, "dimension");
    std::vector<double> c(static_cast<std::size_t>(n64 * n64));
    if (n == 0 || depth == 0) return c;
    const double one = 1.0, zero = 0.0;
    const int lda = transpose ? depth : n;  // A is n × depth, or depth × n for Aᵀ·A
    dsyrk_("L", transpose ? "T" : "N", &n, &depth, &one, a.data(), &lda, &zero, c.data(), &n);
    return c;
}

std::vector<double> top_symmetric_eigen(std::span<double> a, std::int64_t n64, std::int64_t count64,
                                        std::vector<double>& vectors) {
    const int n = lapack::checked_int(n64, "dimension");
    const int count = static_cast<int>(std::clamp<std::int64_t>(count64, 0, n));
    vectors.assign(static_cast<std::size_t>(n) * static_cast<std::size_t>(count), 0.0);
    if (count == 0) return {};
    require_finite_lower_triangle(a, n64, "LAPACK syevr", "symmetric matrix");
    // RANGE = 'I' with IL..IU the `count` largest (LAPACK numbers eigenvalues ascending from 1); dsyevr
    // reduces to tridiagonal form once and finds only those pairs (MRRR), so the cost past the reduction
    // is O(n·count). ABSTOL = 0: LAPACK's default tolerance.
    const int il = n - count + 1, iu = n;
    const double vl = 0, vu = 0, abstol = 0;
    int found = 0, info = 0, lwork = -1, liwork = -1, iquery = 0;
    double query = 0;
    std::vector<double> lambda(static_cast<std::size_t>(n));
    std::vector<int> support(2 * static_cast<std::size_t>(count));
    dsyevr_("V", "I", "L", &n, a.data(), &n, &vl, &vu, &il, &iu, &abstol, &found, lambda.data(),
            vectors.data(), &n, support.data(), &query, &lwork, &iquery, &liwork, &info);
    lwork = static_cast<int>(query) + 1;
    liwork = iquery + 1;
    std::vector<double> work(static_cast<std::size_t>(lwork));
    std::vector<int> iwork(static_cast<std::size_t>(liwork));
    dsyevr_("V", "I", "L", &n, a.data(), &n, &vl, &vu, &il, &iu, &abstol, &found, lambda.data(),
            vectors.data(), &n, support.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
    if (info != 0 || found != count)
        throw_numeric_error(
            fmt::format("LAPACK syevr failed on a {}x{} symmetric matrix (info {}, {} of {} "
                        "eigenpairs)",
                        n, n, info, found, count));
    lambda.resize(static_cast<std::size_t>(count));
    return lambda;  // ascending
}

}  // namespace diffract::linalg::cpu
