// Two same-shape matrices B (a base) and M (a model) compared through their Gram matrices, so that
// neither is ever held whole: both are streamed in slabs along their longer side and only k × k
// products are kept (k = the shorter side). From them:
//   BᵀB, MᵀM → σ and the short-side singular vectors of B and of M (eigen-decompositions);
//   BᵀM      → the long-side overlaps, since u_i = X v_i / σ_i gives
//              u_b,iᵀ u_m,j = (V_bᵀ BᵀM V_m)_ij / (σ_b,i σ_m,j);
//   DᵀD      → σ of the delta D = M − B.
// For an embedding matrix (100k × 4k) this replaces two 3 GB factors by four 134 MB products.
//
// Accuracy: λ carries an absolute error ~ε64·λ_max, so the vectors of the smallest components lose
// digits as λ_min/λ_max falls; callers compare λ_min/λ_max with kGramVectorGuard and fall back to a
// whole-matrix SVD below it (see compare.cpp).
//
// Where: the slabs are read and differenced on the host (norms, the identical check); the k × k
// products accumulate where the backend puts them (GramProducts: host BLAS, or on the device, where
// each slab is uploaded and the products stay until read), and the eigen-decompositions and k × k
// products of the factors run on the backend too (Backend::symmetric_eigen, Backend::multiply).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "diffract/core/matrix.hpp"

namespace diffract::linalg {

class Backend;

// The four k × k products of GramPair, accumulated slab by slab, wherever a backend computes them.
class GramProducts {
public:
    virtual ~GramProducts() = default;
    // Adds X_bᵀX_b (with_base only), X_mᵀX_m and X_dᵀX_d (lower triangles) and X_bᵀX_m (full) for one
    // slab of `len` long-side rows of k values each: row-major len × k, or, with `short_side_rows`,
    // k × len. `first` overwrites instead of adding. The slabs may be reused as soon as it returns.
    virtual void add(const double* base, const double* model, const double* delta, std::int64_t len,
                     bool short_side_rows, bool first) = 0;
    // The same from f32 slabs (Backend::f32_gram_products' implementations): X_bᵀX_b, X_mᵀX_m and X_bᵀX_m
    // in f32, X_dᵀX_d in f64 from the exact f64 differences. The others throw std::logic_error.
    virtual void add_f32(const float* base, const float* model, const double* delta, std::int64_t len,
                         bool short_side_rows, bool first);
    // Moves the column-major k × k products out (bb stays empty without with_base).
    virtual void results(std::vector<double>& bb, std::vector<double>& mm, std::vector<double>& bm,
                         std::vector<double>& dd) = 0;
};

// The host BLAS implementation (what the CPU backend returns).
std::unique_ptr<GramProducts> cpu_gram_products(std::int64_t k, bool with_base);
// Its f32 counterpart (--precision f32): f32 products widened to f64 when read.
std::unique_ptr<GramProducts> cpu_f32_gram_products(std::int64_t k, bool with_base);

// The vectors are trusted when λ_min / λ_max ≥ this. Measured against numpy's f64 SVD (512² and
// 1024² matrices with geometric spectra, a model = base + low-rank and noise updates): at a ratio of
// 1e-9 the worst single overlap errs by 1.4e-8 to 2.4e-8 and the agreement means by 6e-11; at 1e-8,
// 1.2e-9 and 1.6e-12; at 1e-10 the worst overlap errs by 1.7e-7. Square random matrices sit near
// the guard (~1e-7 at 1024²; around 1e-9 at 4096², where some fall back).
inline constexpr double kGramVectorGuard = 1e-9;

class GramPair {
public:
    // The products run where `backend` puts them (host BLAS when null).
    explicit GramPair(std::int64_t k, bool with_base = true, Backend* backend = nullptr);
    // With f32 products (Backend::f32_gram_products): slabs are then added as f32.
    GramPair(std::int64_t k, bool with_base, std::unique_ptr<GramProducts> f32_products);
    bool f32() const { return f32_; }
    std::int64_t k() const { return k_; }
    // One slab of both matrices: `len` rows of the long side, each of k values. `short_side_rows`:
    // the slab is stored k × len (row-major), i.e. the long side is the matrices' columns.
    void add(const Matrix<double>& base_slab, const Matrix<double>& model_slab, bool short_side_rows);
    void add(const Matrix<float>& base_slab, const Matrix<float>& model_slab, bool short_side_rows);
    bool identical() const { return identical_; }  // every slab so far equal
    double base_sq_norm() const { return b2_; }
    double model_sq_norm() const { return m2_; }
    double delta_sq_norm() const { return d2_; }
    // Column-major k × k: BᵀB (lower triangle; only with_base), MᵀM (lower), BᵀM (full), DᵀD (lower).
    // The first call ends accumulation (a device hands its products back then). The caller may move
    // or release each one once used.
    std::vector<double>& base_gram() { return collected().bb; }
    std::vector<double>& model_gram() { return collected().mm; }
    std::vector<double>& cross() { return collected().bm; }
    std::vector<double>& delta_gram() { return collected().dd; }

private:
    struct Products {
        std::vector<double> bb, mm, bm, dd;
    };
    Products& collected();
    template <typename T>
    void add_slabs(const Matrix<T>& b, const Matrix<T>& m, bool short_side_rows);

    std::int64_t k_;
    bool with_base_, f32_ = false, first_ = true, identical_ = true;
    double b2_ = 0, m2_ = 0, d2_ = 0;
    std::vector<double> delta_;
    std::unique_ptr<GramProducts> products_;
    std::unique_ptr<Products> results_;
};

// Eigenvalues (ascending) of the symmetric column-major k × k matrix `a` (lower triangle used);
// with `vectors`, `a` is overwritten by the eigenvectors (column c pairs with value c).
// Values only of an order ≥ kTwoStageMinOrder go through LAPACK's two-stage dsyevd_2stage: measured
// 1.6-1.9x faster than dsyevd at 2048-4096 on an Intel Xeon, within 3 % of it on an AMD Zen, as accurate
// (docs/performance.md, bench_eigen_levers); below 1024 it was slower (0.013 s against 0.010 s at 512).
inline constexpr std::int64_t kTwoStageMinOrder = 1024;
std::vector<double> symmetric_eigen(std::span<double> a, std::int64_t k, bool vectors);

// C = op(A) · op(B), m × n, every matrix column-major; op(X) = Xᵀ when its flag is set, and
// `inner` is the shared dimension (f64 BLAS gemm).
std::vector<double> multiply(std::span<const double> a, bool transpose_a, std::span<const double> b,
                             bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t inner);

}  // namespace diffract::linalg
