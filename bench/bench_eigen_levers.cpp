// bench_eigen_levers: the pieces of the values-only Gram route on 1B-class shapes, each LAPACK/BLAS
// alternative timed in the same run, one thread, with its accuracy against f64 gesdd (issue 16).
//
//   gemm peaks     dgemm / sgemm n = 2048 (best of 3), GFLOP/s
//   gram products  dsyrk (f64, today) and ssyrk (f32) of WᵀW, the smaller side; GFLOP/s = k²·inner
//   eigenvalues    of the same f64 Gram matrix, values only: dsyevd (today), dsyevd_2stage, dsyevr,
//                  dsyev_2stage
//   baseline       dgesdd values-only on W (a plain LAPACK loop)
// Accuracy: max relative difference of σ_max, Σσ and σ_min to dgesdd's, for every route.
// Usage: bench_eigen_levers [--shapes 2048x2048,8192x2048] [--reps 1]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "diffract/core/random.hpp"
#include "diffract/linalg/backend.hpp"
#include "lapack_bench.hpp"

using Clock = std::chrono::steady_clock;

namespace {

double timed(const std::function<void()>& f) {
    const auto t = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<double> sigma_from_lambda(std::vector<double> lambda) {
    std::sort(lambda.begin(), lambda.end());
    for (auto& l : lambda) l = std::sqrt(std::max(l, 0.0));
    return lambda;
}

struct Errors {
    double max, nuclear, min;
};

Errors errors(const std::vector<double>& s, const std::vector<double>& ref) {
    double a = 0, b = 0;
    for (std::size_t i = 0; i < s.size(); ++i) a += s[i], b += ref[i];
    return {std::abs(s.back() - ref.back()) / ref.back(), std::abs(a - b) / b,
            std::abs(s.front() - ref.front()) / ref.front()};
}

// Eigenvalues of a copy of the k × k lower-triangular Gram matrix g by one LAPACK driver (values only).
std::vector<double> eigen(const std::string& driver, std::vector<double> g, int k) {
    std::vector<double> w(static_cast<std::size_t>(k));
    int info = 0, lwork = -1, liwork = -1, iq = 0;
    double q = 0;
    if (driver == "dsyevr") {
        const double zero = 0, abstol = 0;
        const int one = 1;
        int found = 0;
        std::vector<int> isuppz(2 * static_cast<std::size_t>(k));
        double z = 0;
        const int ldz = 1;
        dsyevr_("N", "A", "L", &k, g.data(), &k, &zero, &zero, &one, &one, &abstol, &found, w.data(), &z,
                &ldz, isuppz.data(), &q, &lwork, &iq, &liwork, &info);
        lwork = static_cast<int>(q) + 1, liwork = iq + 1;
        std::vector<double> work(static_cast<std::size_t>(lwork));
        std::vector<int> iwork(static_cast<std::size_t>(liwork));
        dsyevr_("N", "A", "L", &k, g.data(), &k, &zero, &zero, &one, &one, &abstol, &found, w.data(), &z,
                &ldz, isuppz.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
    } else if (driver == "dsyev_2stage") {
        dsyev_2stage_("N", "L", &k, g.data(), &k, w.data(), &q, &lwork, &info);
        lwork = static_cast<int>(q) + 1;
        std::vector<double> work(static_cast<std::size_t>(lwork));
        dsyev_2stage_("N", "L", &k, g.data(), &k, w.data(), work.data(), &lwork, &info);
    } else {
        auto* f = driver == "dsyevd" ? dsyevd_ : dsyevd_2stage_;
        f("N", "L", &k, g.data(), &k, w.data(), &q, &lwork, &iq, &liwork, &info);
        lwork = static_cast<int>(q) + 1, liwork = iq + 1;
        std::vector<double> work(static_cast<std::size_t>(lwork));
        std::vector<int> iwork(static_cast<std::size_t>(liwork));
        f("N", "L", &k, g.data(), &k, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
    }
    if (info != 0) std::fprintf(stderr, "%s info %d\n", driver.c_str(), info);
    return w;
}

void print_errors(const char* name, const Errors& e) {
    std::printf("    \"%s_rel_err\": {\"sigma_max\": %.2g, \"nuclear\": %.2g, \"sigma_min\": %.2g},\n", name,
                e.max, e.nuclear, e.min);
}

void one_shape(int rows, int cols) {
    // Row-major rows × cols W (cols ≤ rows): column-major it is the cols × rows matrix Wᵀ, and
    // WᵀW = (Wᵀ)(Wᵀ)ᵀ is syrk 'N' with n = cols, inner = rows, as the engine does.
    const int k = cols, inner = rows;
    std::vector<double> w(static_cast<std::size_t>(rows) * cols);
    diffract::Rng rng(7);
    for (auto& v : w) v = rng.normal() * 0.02;
    std::vector<float> wf(w.begin(), w.end());
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = wf[i];  // the same (f32-exact) weights for both

    std::vector<double> s(static_cast<std::size_t>(k));
    const double t_gesdd = timed([&] {
        std::vector<double> a(w);
        int info = 0, lwork = -1, one = 1;
        double q = 0, u = 0, vt = 0;
        std::vector<int> iwork(8 * static_cast<std::size_t>(k));
        dgesdd_("N", &k, &inner, a.data(), &k, s.data(), &u, &one, &vt, &one, &q, &lwork, iwork.data(),
                &info);
        lwork = static_cast<int>(q) + 1;
        std::vector<double> work(static_cast<std::size_t>(lwork));
        dgesdd_("N", &k, &inner, a.data(), &k, s.data(), &u, &one, &vt, &one, work.data(), &lwork,
                iwork.data(), &info);
    });
    std::sort(s.begin(), s.end());

    std::vector<double> g(static_cast<std::size_t>(k) * k);
    std::vector<float> gf(g.size());
    const double one = 1, zero = 0;
    const float onef = 1, zerof = 0;
    const double t_dsyrk =
        timed([&] { dsyrk_("L", "N", &k, &inner, &one, w.data(), &k, &zero, g.data(), &k); });
    const double t_ssyrk =
        timed([&] { ssyrk_("L", "N", &k, &inner, &onef, wf.data(), &k, &zerof, gf.data(), &k); });
    const double syrk_flops = static_cast<double>(k) * k * inner;

    std::printf("  \"%dx%d\": {\n", rows, cols);
    std::printf("    \"dgesdd_values_s\": %.3f,\n    \"dsyrk_s\": %.3f, \"dsyrk_gflops\": %.1f,\n", t_gesdd,
                t_dsyrk, syrk_flops / t_dsyrk / 1e9);
    std::printf("    \"ssyrk_s\": %.3f, \"ssyrk_gflops\": %.1f,\n", t_ssyrk, syrk_flops / t_ssyrk / 1e9);
    for (const char* driver : {"dsyevd", "dsyevd_2stage", "dsyevr", "dsyev_2stage"}) {
        std::vector<double> lambda;
        const double t = timed([&] { lambda = eigen(driver, g, k); });
        std::printf("    \"%s_s\": %.3f,\n", driver, t);
        print_errors(driver, errors(sigma_from_lambda(lambda), s));
    }
    std::vector<double> gw(gf.begin(), gf.end());
    print_errors("ssyrk_dsyevd", errors(sigma_from_lambda(eigen("dsyevd", gw, k)), s));
    std::printf("    \"lambda_min_over_max\": %.3g\n  },\n", s.front() * s.front() / (s.back() * s.back()));
}

}  // namespace

int main(int argc, char** argv) {
    std::string shapes = "2048x2048,8192x2048";
    for (int i = 1; i + 1 < argc; i += 2)
        if (!std::strcmp(argv[i], "--shapes")) shapes = argv[i + 1];
    openblas_set_num_threads(1);
    const int n = 2048;
    std::vector<double> a(static_cast<std::size_t>(n) * n, 0.5), b(a.size(), 0.25), c(a.size());
    std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(c.size());
    const double one = 1, zero = 0;
    const float onef = 1, zerof = 0;
    double dbest = 1e300, sbest = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
        dbest =
            std::min(dbest, timed([&] {
                         dgemm_("N", "N", &n, &n, &n, &one, a.data(), &n, b.data(), &n, &zero, c.data(), &n);
                     }));
        sbest = std::min(sbest, timed([&] {
                             sgemm_("N", "N", &n, &n, &n, &onef, af.data(), &n, bf.data(), &n, &zerof,
                                    cf.data(), &n);
                         }));
    }
    std::printf("{\n  \"threads\": 1,\n  \"dgemm_gflops\": %.1f,\n  \"sgemm_gflops\": %.1f,\n",
                2.0 * n * n * n / dbest / 1e9, 2.0 * n * n * n / sbest / 1e9);
    std::size_t pos = 0;
    while (pos < shapes.size()) {
        const auto end = std::min(shapes.find(',', pos), shapes.size());
        const std::string shape = shapes.substr(pos, end - pos);
        const auto x = shape.find('x');
        one_shape(std::atoi(shape.substr(0, x).c_str()), std::atoi(shape.substr(x + 1).c_str()));
        pos = end + 1;
    }
    std::printf("  \"done\": true\n}\n");
}
