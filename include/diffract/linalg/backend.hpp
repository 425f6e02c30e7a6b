// The linear-algebra backend: everything above it (metrics, compare, edits) asks for singular
// values or thin SVDs through this interface and never assumes the CPU.
//
// Conventions: input matrices are row-major m × n (Matrix<T>); singular values are returned
// ASCENDING (the reference library's order), and the columns of U (m × k) and V (n × k),
// k = min(m, n), follow the same order, so W = U diag(s) Vᵀ.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/core/matrix.hpp"
#include "diffract/core/names.hpp"

namespace diffract::linalg {

class GramProducts;  // gram_pair.hpp

// How singular values without vectors are computed.
//   gesdd: LAPACK divide and conquer, values only. Backward stable: |Δσ| ≲ ε σ_max.
//   gram:  G = WᵀW (smaller side, accumulated in f64) then syevd, σ = √λ. Absolute error on λ is
//          ~ε64 σ_max², so σ keeps ~ε64 σ_max² / σ: exact to f32 precision unless the spectrum is
//          ill-conditioned, which the guard detects (λ_min / λ_max < kGramConditionGuard); the
//          CPU then recomputes the few values under the guard from the triangular factor
//          (cpu/small_values.cpp), or the whole matrix with gesdd when they are many.
//   auto:  gram (with the guard) — measured the faster route here (bench/bench_svd).
enum class SvdRoute { auto_route, gesdd, gram };
inline constexpr NameTable<SvdRoute, 3> kSvdRouteNames{
    {{SvdRoute::auto_route, "auto"}, {SvdRoute::gesdd, "gesdd"}, {SvdRoute::gram, "gram"}}};

inline constexpr double kGramConditionGuard = 1e-9;

// The permutation null of an m × n matrix (m ≥ n) has a Marchenko-Pastur spectrum whose
// λ_min/λ_max is ((1 - 1/√Q)/(1 + 1/√Q))² at Q = m/n: 0.029 at Q = 2, but ~1/n² for square matrices.
// From Q = kNullF32MinAspect the analysis hands the null to null_singular_values in f32, which keeps
// an f32 result only when its λ_min/λ_max ≥ kNullF32Guard (a spike from a nonzero mean can lower it);
// the f32 spectrum's error on σ is then ≲ 1e-4 relative (docs/metrics.md), far inside the spread of
// the draw itself. Square-ish nulls stay on the f64 Gram route, where σ_min needs f64.
inline constexpr double kNullF32MinAspect = 2.0;
inline constexpr double kNullF32Guard = 1e-2;
inline bool null_in_f32(std::int64_t rows, std::int64_t cols) {
    const auto lo = std::min(rows, cols), hi = std::max(rows, cols);
    return lo > 0 && static_cast<double>(hi) >= kNullF32MinAspect * static_cast<double>(lo);
}

// --precision f32 on the CPU: Gram products in f32 (ssyrk, sgemm), kept when λ_min / λ_max ≥ kF32GramGuard,
// else recomputed in f64. The f32 product's error on λ is ≲ 0.1 ε32 λ_max measured (docs/performance.md),
// so at 1e-3 it moves σ_min by ≲ 3e-6 relative, inside the --precision f32 contract (docs/metrics.md).
// 1e-2 sent the spiked MLP matrices of a 1B-shaped model (λ_min/λ_max ≈ 4e-3) to f64.
inline constexpr double kF32GramGuard = 1e-3;
// Tried only on matrices at least this much longer than short: the λ_min/λ_max of a Gaussian block is
// ((1 - 1/√Q)/(1 + 1/√Q))² (Marchenko-Pastur), 0.11 at Q = 4 but ~0 for square matrices, where trying
// would cost a product and a decomposition for nothing.
inline constexpr double kF32GramMinAspect = 4.0;
inline bool f32_gram_tried(std::int64_t short_side, std::int64_t long_side) {
    return short_side > 0 &&
           static_cast<double>(long_side) >= kF32GramMinAspect * static_cast<double>(short_side);
}
// Whether an f32 Gram product's spectrum λ (ascending) is kept (kF32GramGuard).
inline bool f32_gram_kept(const std::vector<double>& lambda) {
    return !lambda.empty() && lambda.back() > 0.0 && lambda.front() >= kF32GramGuard * lambda.back();
}

struct Svd {
    std::vector<double> s;  // ascending
    Matrix<double> u;       // m × k, column c pairs with s[c]
    Matrix<double> v;       // n × k
};

// Singular values with the precision of the arithmetic that produced them. Under --precision f32 a matrix
// the f32 routes cannot serve within their contract (the CPU's kF32GramMinAspect and kF32GramGuard) is
// computed from its f32 entries in f64, and its row says so (the tables' `precision` column).
struct Spectrum {
    std::vector<double> s;  // ascending
    bool f32 = true;        // f32 arithmetic (an f32 Gram product, sgesdd); false: f64
};

// The few smallest components of an ill-conditioned matrix (Backend::small_components).
struct SmallComponents {
    std::vector<double> s;        // the p smallest singular values, ascending
    std::vector<double> vectors;  // their short-side singular vectors: column-major k × p, k = min(m, n)
};

class Backend {
public:
    virtual ~Backend() = default;
    // Singular values, ascending, computed at the matrix's precision (float → f32 LAPACK for
    // gesdd; the gram route accumulates in f64 whatever the input).
    virtual std::vector<double> singular_values(const Matrix<float>& w, SvdRoute route) = 0;
    virtual std::vector<double> singular_values(const Matrix<double>& w, SvdRoute route) = 0;
    // singular_values of an f32 matrix with the precision that served it. The default, for a backend
    // without an f64 fallback of its own, says f32.
    virtual Spectrum f32_spectrum(const Matrix<float>& w, SvdRoute route) {
        return {singular_values(w, route)};
    }
    // The singular values (ascending) of a permutation null (analysis' rand_svd): a random draw, so a
    // backend may trade the last digits for speed where the draw's own spread dwarfs them. The CPU
    // backend runs the Gram product and the eigenvalues in f32 on matrices whose null is
    // well-conditioned (null_in_f32), else singular_values; the default is singular_values.
    virtual std::vector<double> null_singular_values(const Matrix<float>& w, SvdRoute route) {
        return singular_values(w, route);
    }
    // Singular values (ascending) of blocks of one stored tensor, result[i] for blocks[i], each as if
    // the block were read with read_matrix<double> (`f64`) or read_matrix<float> and passed to
    // singular_values with `route`. The tensor is read once and the equally shaped blocks (the heads
    // of a projection) run as batches (gram_batch.hpp); a device backend uploads the tensor at its
    // storage width (bf16: 2 bytes an element) and decodes it on the device.
    virtual std::vector<std::vector<double>> block_singular_values(const TensorInfo& t,
                                                                   std::span<const MatrixBlock> blocks,
                                                                   bool f64, SvdRoute route) = 0;
    // block_singular_values(t, blocks, false, route) with each block's precision (f32_spectrum). The
    // default says f32 for every block.
    virtual std::vector<Spectrum> f32_block_spectra(const TensorInfo& t, std::span<const MatrixBlock> blocks,
                                                    SvdRoute route);
    // Thin SVD with vectors (gesdd, JOBZ='S').
    virtual Svd svd(const Matrix<float>& w) = 0;
    virtual Svd svd(const Matrix<double>& w) = 0;
    // The p components of `w` whose Gram eigenvalue is under guard·λ_max (λ: the short side's Gram
    // spectrum, ascending, as the Gram route computed it), to gesdd's accuracy, without a whole SVD:
    // compare's Gram route when only those components' vectors are not to be trusted. nullopt where p
    // is not small (a nearly rank-deficient matrix) or the backend has no such route: the caller then
    // runs the whole SVD.
    virtual std::optional<SmallComponents> small_components(const Matrix<double>& /*w*/,
                                                            const std::vector<double>& /*lambda*/,
                                                            double /*guard*/) {
        return std::nullopt;
    }
    // The dense k × k work of compare's Gram route (gram_pair.hpp), where this backend runs it:
    // eigenvalues (ascending) of the symmetric column-major k × k `a` (lower triangle; with
    // `vectors`, `a` is overwritten by the eigenvectors), C = op(A)·op(B) (column-major m × n,
    // `inner` the shared side), and the accumulator of two streamed matrices' Gram products.
    virtual std::vector<double> symmetric_eigen(std::span<double> a, std::int64_t k, bool vectors) = 0;
    // The Gram matrix A·Aᵀ of the column-major n × depth `a` (with `transpose`: Aᵀ·A of the column-major
    // depth × n `a`), column-major n × n with its lower triangle set: what symmetric_eigen and
    // top_symmetric_eigen read. The default is multiply (both triangles); the CPU runs dsyrk, half its flops.
    virtual std::vector<double> gram(std::span<const double> a, bool transpose, std::int64_t n,
                                     std::int64_t depth);
    // The `count` largest eigenvalues (ascending) of the symmetric column-major n × n `a` (lower triangle;
    // overwritten), and their eigenvectors in `vectors` (column-major n × count, column c pairs with
    // value c): a top singular subspace (analysis/expert_overlap.hpp) without the whole decomposition.
    // The default runs symmetric_eigen on all of `a`; the CPU computes only those (LAPACK dsyevr).
    virtual std::vector<double> top_symmetric_eigen(std::span<double> a, std::int64_t n, std::int64_t count,
                                                    std::vector<double>& vectors);
    virtual std::vector<double> multiply(std::span<const double> a, bool transpose_a,
                                         std::span<const double> b, bool transpose_b, std::int64_t m,
                                         std::int64_t n, std::int64_t inner) = 0;
    virtual std::unique_ptr<GramProducts> gram_products(std::int64_t k, bool with_base) = 0;
    // The same products from f32 slabs under --precision f32 (GramProducts' f32 add): BᵀB, MᵀM and BᵀM
    // in f32, DᵀD in f64. Null where this backend has none (the caller then streams f64 slabs), or when
    // the unit's long side is under kF32GramMinAspect times its short side k.
    virtual std::unique_ptr<GramProducts> f32_gram_products(std::int64_t k, std::int64_t length,
                                                            bool with_base);
    // The device's measured f32 matrix-multiply rate (GFLOP/s, best of 3 n×n products): the peak that
    // benchmarks report their rates against.
    virtual double measure_matmul_gflops(int n) = 0;
};

// Where the SVDs run: cpu (LAPACK/OpenBLAS) or cuda (cuSOLVER).
enum class Device { cpu, cuda };
inline constexpr NameTable<Device, 2> kDeviceNames{{{Device::cpu, "cpu"}, {Device::cuda, "cuda"}}};

// --device's text as make_backend takes it: throws InputError for an unknown name, or cuda in a build
// without CUDA, without starting a backend (options are checked even when no matrix is left to compute).
Device parse_device(std::string_view text);
// The device's backend (cuda in a build without CUDA: InputError).
std::unique_ptr<Backend> make_backend(Device device);
// make_backend(parse_device(text)): the benchmarks' --device.
std::unique_ptr<Backend> make_backend(std::string_view device);

// block_singular_values the plain way, a block at a time: read, then singular_values.
std::vector<std::vector<double>> block_singular_values_one_by_one(Backend& backend, const TensorInfo& t,
                                                                  std::span<const MatrixBlock> blocks,
                                                                  bool f64, SvdRoute route);

// f32_block_spectra the plain way, a block at a time: read in f32, then f32_spectrum.
std::vector<Spectrum> block_spectra_one_by_one(Backend& backend, const TensorInfo& t,
                                               std::span<const MatrixBlock> blocks, SvdRoute route);

// A block as f64 holding the values read_matrix<T> gives (T = double when `f64`, else float: an f64
// or GGUF block-quantised tensor read at f32 precision is rounded to f32 first, exactly as the f32 routes see
// it).
Matrix<double> read_widened(const TensorInfo& t, const MatrixBlock& block, bool f64);

// Let every worker thread run single-threaded BLAS (parallelism comes from matrices in flight).
void set_blas_threads(int n);

}  // namespace diffract::linalg
