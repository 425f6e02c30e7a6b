// The CPU backend's block_singular_values (block_values.cpp), apart from the backend class so that
// the batching has a file of its own.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "diffract/core/matrix.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::linalg::cpu {

// `self` computes what the batches cannot: single blocks, the gesdd route, and the blocks whose
// Gram spectrum trips the auto route's guard. Each block with the precision that served it (f64: never
// f32).
std::vector<Spectrum> block_spectra(Backend& self, const TensorInfo& t, std::span<const MatrixBlock> blocks,
                                    bool f64, SvdRoute route);

// kF32GramGuard, kF32GramMinAspect: backend.hpp (compare's f32 products use them too).

// (svd_cpu.cpp): σ from the f32 Gram product of the column-major order × depth matrix A
// (trans: Aᵀ, depth × order) at leading dimension lda, widened and decomposed in f64. The product's
// error on λ is absolute, a small multiple of ε₃₂·λ_max (docs/performance.md), so the result is kept only
// when λ_min/λ_max ≥ kF32GramGuard; nullopt asks the caller for the f64 product. The per-matrix and the
// batched head routes both call it, so batching does not change an f32 result.
std::optional<std::vector<double>> guarded_f32_gram_values(bool trans, int order, int depth, const float* a,
                                                           int lda);

// (svd_cpu.cpp): λ (ascending) of the f64 Gram product of the column-major order × depth matrix A
// (trans: Aᵀ, depth × order) at leading dimension lda: one dsyrk, then symmetric_eigen. A whole f64
// matrix and a batched head block alike.
std::vector<double> gram_eigenvalues(bool trans, int order, int depth, const double* a, int lda);

// (svd_cpu.cpp): σ (ascending) by LAPACK gesdd, values only: the backend's gesdd route; and the thin
// SVD with vectors (Backend::svd).
std::vector<double> gesdd_values(const Matrix<double>& w);
Svd gesdd_svd(const Matrix<double>& w);

// (small_values.cpp): σ of a matrix whose Gram spectrum tripped the auto route's guard, without a
// whole gesdd: the Gram route's values from λ_i ≥ kGramConditionGuard·λ_max up (within the auto route's
// contract there), and the p values under it recomputed from the matrix's triangular factor (LQ or QR,
// σ(T) = σ(W)) by inverse subspace iteration with a Rayleigh-Ritz step, whose error is gesdd's,
// ~ε·σ_max. `lambda` is the Gram spectrum, ascending. nullopt (the caller runs gesdd) when p is not
// small (a rank-deficient matrix: then most of the spectrum is under the guard), the factor is
// singular to working precision, or the iteration has not converged.
template <typename T>
std::optional<std::vector<double>> refined_small_values(const Matrix<T>& w,
                                                        const std::vector<double>& lambda);

// (small_values.cpp): Backend::small_components on the CPU: the p components under guard·λ_max from
// the same triangular factor and subspace iteration as refined_small_values, with their Ritz vectors
// (right singular vectors of the factor R, RᵀR = the short side's Gram matrix).
std::optional<SmallComponents> small_components(const Matrix<double>& w, const std::vector<double>& lambda,
                                                double guard);

// (top_subspace.cpp): Backend::gram on the CPU (dsyrk, the lower triangle) and Backend::top_symmetric_eigen:
// LAPACK dsyevr for the `count` largest eigenpairs only (RANGE = 'I'), after the same finiteness check as
// symmetric_eigen. The two steps of a top singular subspace (analysis/expert_overlap.hpp).
std::vector<double> gram(std::span<const double> a, bool transpose, std::int64_t n, std::int64_t depth);
std::vector<double> top_symmetric_eigen(std::span<double> a, std::int64_t n, std::int64_t count,
                                        std::vector<double>& vectors);

}  // namespace diffract::linalg::cpu
