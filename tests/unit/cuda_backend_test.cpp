// The CUDA backend against the CPU backend, on the paths only a GPU runs: tensors uploaded at their
// storage width and decoded on the device (bf16, f16, f32, f64 rounded for f32 precision; f8 decoded
// on the host), across the 32 MiB chunks of the overlapped upload, heads as strided batches, and the
// auto route's fallback for rank-deficient heads. Skipped (and reported as skipped) where no GPU or no
// CUDA build is available: scripts/gpu_check.sh runs it on a lent GPU machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "diffract/core/error.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/linalg/gram_pair.hpp"

#include "random_matrix.hpp"
#include "stored_tensor.hpp"

using namespace diffract;
using diffract::test_data::random_matrix;
using diffract::test_data::stored_tensor;

namespace {

std::unique_ptr<linalg::Backend> cuda_or_null() {
    try {
        return linalg::make_backend("cuda");
    } catch (const std::exception&) {
        return nullptr;
    }
}

// Heads of `dim` rows (q/k/v) or, with `columns`, of `dim` columns (o), plus the whole matrix.
std::vector<MatrixBlock> whole_and_heads(std::int64_t rows, std::int64_t cols, std::int64_t dim,
                                         bool columns) {
    std::vector<MatrixBlock> out = {{0, rows, 0, cols, false}};
    for (std::int64_t h = 0; h < (columns ? cols : rows) / dim; ++h)
        out.push_back(columns ? MatrixBlock{0, rows, h * dim, dim, false}
                              : MatrixBlock{h * dim, dim, 0, cols, false});
    return out;
}

// Both f64 Gram routes; summation order differs: 1e-9 of σ_max (the python parity test's tolerance).
void expect_same_values(const std::vector<std::vector<double>>& gpu,
                        const std::vector<std::vector<double>>& cpu) {
    ASSERT_EQ(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i) {
        ASSERT_EQ(gpu[i].size(), cpu[i].size()) << "block " << i;
        for (std::size_t c = 0; c < cpu[i].size(); ++c)
            EXPECT_NEAR(gpu[i][c], cpu[i][c], 1e-9 * cpu[i].back()) << "block " << i << " component " << c;
    }
}

}  // namespace

TEST(CudaBackend, DeviceDecodedHeadsMatchTheCpuInEveryStorageDtype) {
    auto gpu = cuda_or_null();
    if (!gpu) GTEST_SKIP() << "no CUDA build or no GPU here";
    auto cpu = linalg::make_backend("cpu");
    // 1024 × 512: heads of 64 rows and of 64 columns.
    const auto w = random_matrix(1024, 512, 21);
    for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64, DType::F8_E4M3})
        for (bool f64 : {false, true})
            for (bool columns : {false, true}) {
                SCOPED_TRACE(std::string(dtype_name(dtype)) + (f64 ? " f64" : " f32") +
                             (columns ? " o" : " q"));
                const auto t = stored_tensor(w, dtype);
                const auto blocks = whole_and_heads(1024, 512, 64, columns);
                expect_same_values(gpu->block_singular_values(t, blocks, f64, linalg::SvdRoute::auto_route),
                                   cpu->block_singular_values(t, blocks, f64, linalg::SvdRoute::auto_route));
            }
}

TEST(CudaBackend, UploadAcrossManyChunksMatchesTheCpu) {
    auto gpu = cuda_or_null();
    if (!gpu) GTEST_SKIP() << "no CUDA build or no GPU here";
    auto cpu = linalg::make_backend("cpu");
    // 6000 × 4096 bf16 = 47 MiB: two staging chunks, the second partial; f32 = 94 MiB: three.
    const auto w = random_matrix(6000, 4096, 22);
    for (DType dtype : {DType::BF16, DType::F32}) {
        const auto t = stored_tensor(w, dtype);
        const std::vector<MatrixBlock> blocks = {{0, 6000, 0, 4096, false}, {5872, 128, 0, 4096, false}};
        expect_same_values(gpu->block_singular_values(t, blocks, false, linalg::SvdRoute::auto_route),
                           cpu->block_singular_values(t, blocks, false, linalg::SvdRoute::auto_route));
    }
}

TEST(CudaBackend, RankDeficientHeadsFallBackLikeTheCpu) {
    auto gpu = cuda_or_null();
    if (!gpu) GTEST_SKIP() << "no CUDA build or no GPU here";
    auto cpu = linalg::make_backend("cpu");
    const auto t = stored_tensor(test_data::rank2_matrix(256, 128, 24), DType::F32);
    const auto blocks = whole_and_heads(256, 128, 32, false);
    // f64 precision: both fall back to an f64 direct SVD (Jacobi on the device, dgesdd here) of the
    // same values, so the two leading values agree to 1e-9 and the rest sit at the f32 storage
    // rounding level (~1e-7 σ_max) on both.
    const auto g = gpu->block_singular_values(t, blocks, true, linalg::SvdRoute::auto_route);
    const auto c = cpu->block_singular_values(t, blocks, true, linalg::SvdRoute::auto_route);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
        ASSERT_EQ(g[i].size(), c[i].size());
        const std::size_t k = c[i].size();
        for (std::size_t j = k - 2; j < k; ++j) EXPECT_NEAR(g[i][j], c[i][j], 1e-9 * c[i].back());
        EXPECT_LT(g[i][k - 3], 1e-5 * g[i].back()) << "block " << i;
    }
}

TEST(CudaBackend, MatmulRateIsMeasured) {
    auto gpu = cuda_or_null();
    if (!gpu) GTEST_SKIP() << "no CUDA build or no GPU here";
    EXPECT_GT(gpu->measure_matmul_gflops(2048), 100.0);  // any current GPU exceeds 0.1 TFLOP/s in f32
}

TEST(CudaBackend, CompareGramWorkMatchesTheCpu) {
    auto gpu = cuda_or_null();
    if (!gpu) GTEST_SKIP() << "no CUDA build or no GPU here";
    auto cpu = linalg::make_backend("cpu");
    const std::int64_t k = 96, len = 700;
    for (bool short_side_rows : {false, true}) {
        // Three slabs of a base and a model, streamed through both backends' products.
        linalg::GramPair on_gpu(k, true, gpu.get()), on_cpu(k, true, cpu.get());
        for (std::uint64_t s = 0; s < 3; ++s) {
            const auto b = short_side_rows ? random_matrix(k, len, 40 + s) : random_matrix(len, k, 40 + s);
            auto m = b;
            const auto noise =
                short_side_rows ? random_matrix(k, len, 50 + s) : random_matrix(len, k, 50 + s);
            for (std::size_t i = 0; i < m.data.size(); ++i) m.data[i] += 0.1 * noise.data[i];
            on_gpu.add(b, m, short_side_rows);
            on_cpu.add(b, m, short_side_rows);
        }
        auto near = [](const std::vector<double>& g, const std::vector<double>& c, const char* what) {
            ASSERT_EQ(g.size(), c.size()) << what;
            double scale = 0;
            for (double x : c) scale = std::max(scale, std::abs(x));
            for (std::size_t i = 0; i < c.size(); ++i)
                EXPECT_NEAR(g[i], c[i], 1e-12 * scale) << what << " " << i;
        };
        // Lower triangles of the symmetric products (the upper ones are not referenced), and BᵀM whole.
        auto lower = [&](std::vector<double> v) {
            for (std::int64_t j = 0; j < k; ++j)
                for (std::int64_t i = 0; i < j; ++i) v[static_cast<std::size_t>(i + j * k)] = 0;
            return v;
        };
        near(lower(on_gpu.base_gram()), lower(on_cpu.base_gram()), "BᵀB");
        near(lower(on_gpu.model_gram()), lower(on_cpu.model_gram()), "MᵀM");
        near(lower(on_gpu.delta_gram()), lower(on_cpu.delta_gram()), "DᵀD");
        near(on_gpu.cross(), on_cpu.cross(), "BᵀM");

        // The dense k × k work: eigen-decomposition with vectors, and a product.
        auto a_gpu = on_cpu.model_gram(), a_cpu = on_cpu.model_gram();
        const auto l_gpu = gpu->symmetric_eigen(a_gpu, k, true), l_cpu = cpu->symmetric_eigen(a_cpu, k, true);
        near(l_gpu, l_cpu, "λ");
        for (std::int64_t c = 0; c < k; ++c) {  // each eigenvector equal up to sign
            double dot = 0;
            for (std::int64_t i = 0; i < k; ++i)
                dot +=
                    a_gpu[static_cast<std::size_t>(i + c * k)] * a_cpu[static_cast<std::size_t>(i + c * k)];
            EXPECT_NEAR(std::abs(dot), 1.0, 1e-9) << "eigenvector " << c;
        }
        near(gpu->multiply(a_cpu, true, on_cpu.cross(), false, k, k, k),
             cpu->multiply(a_cpu, true, on_cpu.cross(), false, k, k, k), "VᵀC");
    }
}
