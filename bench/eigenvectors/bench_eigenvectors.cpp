// bench_eigenvectors: compare's eigen-decompositions with vectors (the Gram matrices of a base and a
// model, order k) by every solver issue 16 names, timed in the same run, one thread, one MPI rank:
//
//   dsyevd        LAPACK divide and conquer (what compare runs)
//   dsyevr        LAPACK MRRR
//   ssyevd        the same in f32 (accuracy: how far f32 vectors are from f64 ones)
//   elpa1, elpa2  ELPA's one- and two-stage solvers (Debian's libelpa: MPI build, generic kernels)
//
// Input: G = WᵀW of a Gaussian W (m × k, std 0.02, f32-exact entries), the Gram matrix of a weight
// matrix. Accuracy of every solver: max |λ − λ_dsyevd| / λ_max, the residual max |G z − λ z| / λ_max,
// orthogonality max |ZᵀZ − I|, and the smallest |z_i · z_i,dsyevd| over the top 64 components.
// Built only where pkg-config finds ELPA (libelpa-dev) and DIFFRACT_MPI is on.
//
//   bench_eigenvectors [--shape 4096x4096] [--nblk 32]   (k × m: order k, m rows of W)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lapack_bench.hpp"

extern "C" {
// ELPA's C API without its header: elpa.h's dispatch macros use C11 _Generic, which C++ lacks.
typedef struct elpa_struct* elpa_t;
int elpa_init(int api_version);
elpa_t elpa_allocate(int* error);
int elpa_setup(elpa_t handle);
void elpa_set_integer(elpa_t handle, const char* name, int value, int* error);
void elpa_eigenvectors_a_h_a_d(elpa_t handle, double* a, double* ev, double* q, int* error);
void elpa_deallocate(elpa_t handle, int* error);
void elpa_uninit(int* error);
}

namespace {

constexpr int kElpaApiVersion = 20171201;  // the C API this program is written against
constexpr int kElpaOk = 0, kElpaSolver1Stage = 1, kElpaSolver2Stage = 2;
constexpr int kTopComponents = 64;

using Clock = std::chrono::steady_clock;

double timed(const std::function<void()>& f) {
    const auto t = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t).count();
}

std::size_t at(int i, int j, int k) { return static_cast<std::size_t>(i) + static_cast<std::size_t>(j) * k; }

struct Eigen {
    std::vector<double> values, vectors;  // ascending; column-major k × k
    double seconds = 0;
};

template <typename T, typename Solver>
Eigen syevd(Solver solver, const std::vector<double>& gram, int k) {
    std::vector<T> a(gram.begin(), gram.end()), w(static_cast<std::size_t>(k));
    int info = 0, lwork = -1, liwork = -1, iwork_size = 0;
    T work_size = 0;
    solver("V", "L", &k, a.data(), &k, w.data(), &work_size, &lwork, &iwork_size, &liwork, &info);
    lwork = static_cast<int>(work_size) + 1, liwork = iwork_size + 1;
    std::vector<T> work(static_cast<std::size_t>(lwork));
    std::vector<int> iwork(static_cast<std::size_t>(liwork));
    Eigen e;
    e.seconds = timed([&] {
        solver("V", "L", &k, a.data(), &k, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
    });
    if (info != 0) std::fprintf(stderr, "syevd info %d\n", info);
    e.values.assign(w.begin(), w.end());
    e.vectors.assign(a.begin(), a.end());
    return e;
}

Eigen syevr(const std::vector<double>& gram, int k) {
    std::vector<double> a = gram, w(static_cast<std::size_t>(k)), z(gram.size());
    std::vector<int> support(2 * static_cast<std::size_t>(k));
    const double unused = 0, abstol = 0;
    int found = 0, info = 0, lwork = -1, liwork = -1, iwork_size = 0, one = 1;
    double work_size = 0;
    dsyevr_("V", "A", "L", &k, a.data(), &k, &unused, &unused, &one, &k, &abstol, &found, w.data(), z.data(),
            &k, support.data(), &work_size, &lwork, &iwork_size, &liwork, &info);
    lwork = static_cast<int>(work_size) + 1, liwork = iwork_size + 1;
    std::vector<double> work(static_cast<std::size_t>(lwork));
    std::vector<int> iwork(static_cast<std::size_t>(liwork));
    Eigen e;
    e.seconds = timed([&] {
        dsyevr_("V", "A", "L", &k, a.data(), &k, &unused, &unused, &one, &k, &abstol, &found, w.data(),
                z.data(), &k, support.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
    });
    if (info != 0) std::fprintf(stderr, "dsyevr info %d\n", info);
    e.values = std::move(w);
    e.vectors = std::move(z);
    return e;
}

// One rank holding the whole matrix: a 1 × 1 process grid, blocks of `nblk`.
Eigen elpa(const std::vector<double>& gram, int k, int solver, int nblk) {
    int err = 0;
    elpa_t h = elpa_allocate(&err);
    for (const auto& [name, value] : {std::pair<const char*, int>{"na", k},
                                      {"nev", k},
                                      {"local_nrows", k},
                                      {"local_ncols", k},
                                      {"nblk", nblk},
                                      {"mpi_comm_parent", static_cast<int>(MPI_Comm_c2f(MPI_COMM_WORLD))},
                                      {"process_row", 0},
                                      {"process_col", 0}})
        elpa_set_integer(h, name, value, &err);
    if (elpa_setup(h) != kElpaOk) std::fprintf(stderr, "elpa_setup failed\n");
    elpa_set_integer(h, "solver", solver, &err);
    std::vector<double> a = gram;
    Eigen e;
    e.values.resize(static_cast<std::size_t>(k));
    e.vectors.resize(gram.size());
    e.seconds =
        timed([&] { elpa_eigenvectors_a_h_a_d(h, a.data(), e.values.data(), e.vectors.data(), &err); });
    if (err != kElpaOk) std::fprintf(stderr, "elpa_eigenvectors error %d\n", err);
    elpa_deallocate(h, &err);
    return e;
}

void report(const char* name, const Eigen& e, const Eigen& reference, const std::vector<double>& gram,
            int k) {
    const double top = reference.values.back(), one = 1, zero = 0;
    double values = 0;
    for (int i = 0; i < k; ++i)
        values = std::max(values, std::abs(e.values[static_cast<std::size_t>(i)] -
                                           reference.values[static_cast<std::size_t>(i)]) /
                                      top);
    std::vector<double> product(gram.size());
    dgemm_("N", "N", &k, &k, &k, &one, gram.data(), &k, e.vectors.data(), &k, &zero, product.data(), &k);
    double residual = 0;
    for (int j = 0; j < k; ++j)
        for (int i = 0; i < k; ++i)
            residual =
                std::max(residual, std::abs(product[at(i, j, k)] -
                                            e.vectors[at(i, j, k)] * e.values[static_cast<std::size_t>(j)]));
    dgemm_("T", "N", &k, &k, &k, &one, e.vectors.data(), &k, e.vectors.data(), &k, &zero, product.data(), &k);
    double orthogonality = 0;
    for (int j = 0; j < k; ++j)
        for (int i = 0; i < k; ++i)
            orthogonality = std::max(orthogonality, std::abs(product[at(i, j, k)] - (i == j ? 1.0 : 0.0)));
    double overlap = 1;
    for (int j = std::max(0, k - kTopComponents); j < k; ++j) {
        double dot = 0;
        for (int i = 0; i < k; ++i) dot += e.vectors[at(i, j, k)] * reference.vectors[at(i, j, k)];
        overlap = std::min(overlap, std::abs(dot));
    }
    std::printf(
        "  \"%s\": {\"seconds\": %.3f, \"dsyevd_over_this\": %.2f, \"values_error\": %.2e, "
        "\"residual\": %.2e, \"orthogonality\": %.2e, \"min_top%d_overlap\": %.12f},\n",
        name, e.seconds, reference.seconds / e.seconds, values, residual / top, orthogonality, kTopComponents,
        overlap);
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    openblas_set_num_threads(1);
    int k = 4096, m = 4096, nblk = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--shape") && std::sscanf(argv[i + 1], "%dx%d", &k, &m) != 2) return 2;
        if (!std::strcmp(argv[i], "--nblk")) nblk = std::atoi(argv[i + 1]);
    }
    std::vector<double> w(static_cast<std::size_t>(k) * static_cast<std::size_t>(m));
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (auto& x : w) x = normal(rng);
    std::vector<double> gram(static_cast<std::size_t>(k) * static_cast<std::size_t>(k));
    const double one = 1, zero = 0;
    dsyrk_("L", "N", &k, &m, &one, w.data(), &k, &zero, gram.data(), &k);
    for (int j = 0; j < k; ++j)
        for (int i = 0; i < j; ++i) gram[at(i, j, k)] = gram[at(j, i, k)];

    if (elpa_init(kElpaApiVersion) != kElpaOk) {
        std::fprintf(stderr, "ELPA does not support API version %d\n", kElpaApiVersion);
        return 1;
    }
    const Eigen reference = syevd<double>(dsyevd_, gram, k);
    std::printf("{\"order\": %d, \"rows\": %d, \"lambda_min_over_max\": %.3g, \"threads\": 1,\n", k, m,
                reference.values.front() / reference.values.back());
    report("dsyevd", reference, reference, gram, k);
    report("dsyevr", syevr(gram, k), reference, gram, k);
    report("ssyevd", syevd<float>(ssyevd_, gram, k), reference, gram, k);
    report("elpa1", elpa(gram, k, kElpaSolver1Stage, nblk), reference, gram, k);
    report("elpa2", elpa(gram, k, kElpaSolver2Stage, nblk), reference, gram, k);
    std::printf("  \"nblk\": %d}\n", nblk);
    int err = 0;
    elpa_uninit(&err);
    MPI_Finalize();
    return 0;
}
