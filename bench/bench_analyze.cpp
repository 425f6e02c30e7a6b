// bench_analyze: the spectral engine on realistic 1B-class shapes (OLMo-2 1B: hidden 2048, 16 heads
// of 128, MLP 8192), in memory, against the machine's measured sgemm peak and a plain LAPACK loop
// measured in the same run. Prints one JSON object; bench/run_bench.py adds the numpy baseline.
//
// Protocol: one warm-up matrix, then each configuration timed once over the whole set (the set is
// large enough — seconds — that timer noise is negligible; repeat the script for spread).
//   sgemm_gflops       the backend's measured f32 matmul rate (n = 2048 on CPU, 8192 on a GPU)
//   plain_lapack_s     sgesdd values-only, one matrix after another, OpenBLAS threads = all
//   plain_lapack_f64_s dgesdd values-only the same way, on the matrices widened to f64 (outside the
//                      timing): LAPACK at the precision our default route computes in (numpy's svd
//                      computes f32 input in f64 too)
//   values_s           our backend (gram route + guard, f64 accumulation), matrices in parallel
//   catalog_s          the full default catalog (two SVDs per matrix: W and its permutation null)
//   heads_one_by_one_s the head blocks of each layer's q/k/v/o, stored bf16, read and decomposed a
//                      block at a time, one thread, at the default precision (f64)
//   heads_batched_s    the same blocks by block_singular_values (what analyze calls): on a GPU
//                      each tensor uploaded as bf16 and decoded there once, its heads as one batch
//   heads_batched_f32_s the same under --precision f32
// GFLOP/s use the nominal flop count of values-only gesdd, 4mn² − 4n³/3 (m ≥ n), for every route.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/core/dtype.hpp"
#include "diffract/core/mapped_file.hpp"
#include "diffract/core/random.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/linalg/blas_info.hpp"
#include "diffract/run/scheduler.hpp"

using namespace diffract;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double nominal_flops(std::int64_t r, std::int64_t c) {
    const double m = static_cast<double>(std::max(r, c)), n = static_cast<double>(std::min(r, c));
    return 4 * m * n * n - 4 * n * n * n / 3;
}

Matrix<float> gaussian(std::int64_t r, std::int64_t c, std::uint64_t seed) {
    Matrix<float> m(r, c);
    Rng rng(seed);
    for (auto& v : m.data) v = static_cast<float>(rng.normal() / std::sqrt(static_cast<double>(c)));
    return m;
}

}  // namespace

int run_bench(int argc, char** argv) {
    int layers = 2, threads = static_cast<int>(std::thread::hardware_concurrency());
    std::string device = "cpu";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--device")) device = argv[i + 1];
        if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    }
    const int hidden = 2048, heads = 16, head_dim = 128, mlp = 8192;
    std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
    for (int l = 0; l < layers; ++l) {
        for (int p = 0; p < 4; ++p) shapes.emplace_back(hidden, hidden);  // q, k, v, o
        shapes.emplace_back(mlp, hidden);                                 // gate, up
        shapes.emplace_back(mlp, hidden);
        shapes.emplace_back(hidden, mlp);                                           // down
        for (int h = 0; h < 3 * heads; ++h) shapes.emplace_back(head_dim, hidden);  // q/k/v head blocks
        for (int h = 0; h < heads; ++h) shapes.emplace_back(hidden, head_dim);      // o head blocks
    }
    std::vector<Matrix<float>> mats;
    double flops = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        mats.push_back(gaussian(shapes[i].first, shapes[i].second, 100 + i));
        flops += nominal_flops(shapes[i].first, shapes[i].second);
    }
    auto backend = linalg::make_backend(device);
    linalg::set_blas_threads(threads);
    const double peak = backend->measure_matmul_gflops(device == "cpu" ? 2048 : 8192);
    backend->singular_values(mats.back(), linalg::SvdRoute::gesdd);  // warm-up

    auto t = Clock::now();
    for (const auto& m : mats) backend->singular_values(m, linalg::SvdRoute::gesdd);
    const double plain = seconds_since(t);
    double plain_f64 = 0;
    for (const auto& m : mats) {
        Matrix<double> wide(m.rows, m.cols);
        std::copy(m.data.begin(), m.data.end(), wide.data.begin());
        t = Clock::now();
        backend->singular_values(wide, linalg::SvdRoute::gesdd);
        plain_f64 += seconds_since(t);
    }

    std::vector<run::TaskCost> costs;
    for (const auto& s : shapes) costs.push_back({nominal_flops(s.first, s.second), 0});
    linalg::set_blas_threads(1);
    auto timed_pool = [&](const std::function<void(std::size_t)>& fn) {
        const auto start = Clock::now();
        run::run_tasks(costs, threads, UINT64_MAX, fn);
        return seconds_since(start);
    };
    const double values = timed_pool([&](std::size_t i) {
        thread_local auto b = linalg::make_backend(device);
        b->singular_values(mats[i], linalg::SvdRoute::auto_route);
    });
    const auto fields = analysis::resolve_metrics("default");
    analysis::KernelConfig cfg;
    const double catalog = timed_pool([&](std::size_t i) {
        thread_local auto b = linalg::make_backend(device);
        analysis::compute_fields(mats[i], fields, cfg, *b);
    });
    // Heads: q/k/v (row blocks) and o (column blocks) of every layer, as stored bf16 tensors.
    std::vector<TensorInfo> projections;
    std::vector<std::vector<MatrixBlock>> head_sets;
    for (int l = 0; l < layers; ++l)
        for (int p = 0; p < 4; ++p) {
            const auto& m = mats[static_cast<std::size_t>(l * (7 + 4 * heads) + p)];
            auto bytes = std::make_shared<std::vector<std::byte>>(m.data.size() * 2);
            convert_from_f32(m.data.data(), DType::BF16, m.data.size(), bytes->data());
            TensorInfo stored;
            stored.name = "proj", stored.dtype = DType::BF16, stored.shape = {m.rows, m.cols};
            stored.nbytes = bytes->size();
            stored.file = MappedFile::from_memory("memory:bench", bytes, bytes->data(), bytes->size());
            projections.push_back(std::move(stored));
            std::vector<MatrixBlock> blocks;
            for (int h = 0; h < heads; ++h)
                blocks.push_back(p < 3 ? MatrixBlock{h * head_dim, head_dim, 0, hidden, false}
                                       : MatrixBlock{0, hidden, h * head_dim, head_dim, false});
            head_sets.push_back(std::move(blocks));
        }
    auto heads_timed = [&](bool batched, bool f64 = true) {
        const auto start = Clock::now();
        for (std::size_t i = 0; i < projections.size(); ++i)
            batched ? backend->block_singular_values(projections[i], head_sets[i], f64,
                                                     linalg::SvdRoute::auto_route)
                    : linalg::block_singular_values_one_by_one(*backend, projections[i], head_sets[i], f64,
                                                               linalg::SvdRoute::auto_route);
        return seconds_since(start);
    };
    heads_timed(true);  // warm-up (device allocations, staging buffers)
    const double heads_plain = heads_timed(false), heads_batched = heads_timed(true);
    const double heads_batched_f32 = heads_timed(true, false);
    const double n = static_cast<double>(mats.size());
    std::printf(
        "{\"device\": \"%s\", \"blas\": \"%s\", \"matrices\": %zu, \"layers\": %d, \"threads\": %d, "
        "\"nominal_gflop\": %.2f, "
        "\"sgemm_gflops\": %.2f,\n"
        " \"plain_lapack_s\": %.3f, \"plain_lapack_gflops\": %.2f, \"plain_lapack_f64_s\": %.3f,\n"
        " \"values_s\": %.3f, \"values_matrices_per_s\": %.2f, \"values_gflops\": %.2f, "
        "\"values_fraction_of_sgemm_peak\": %.3f,\n"
        " \"catalog_s\": %.3f, \"catalog_matrices_per_s\": %.2f, \"speedup_values_vs_plain_lapack\": %.2f, "
        "\"speedup_values_vs_plain_lapack_f64\": %.2f,\n"
        " \"head_blocks\": %d, \"heads_one_by_one_s\": %.3f, \"heads_batched_s\": %.3f, "
        "\"speedup_heads_batched\": %.2f, "
        "\"heads_batched_f32_s\": %.3f}\n",
        device.c_str(), linalg::blas_description().c_str(), mats.size(), layers, threads, flops / 1e9, peak,
        plain, flops / plain / 1e9, plain_f64, values, n / values, flops / values / 1e9,
        flops / values / 1e9 / peak, catalog, n / catalog, plain / values, plain_f64 / values,
        4 * heads * layers, heads_plain, heads_batched, heads_plain / heads_batched, heads_batched_f32);
    return 0;
}

// One line on stderr and exit 2 for what the run refuses (no GPU for --device cuda, say).
int main(int argc, char** argv) {
    try {
        return run_bench(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_analyze: %s\n", e.what());
        return 2;
    }
}
