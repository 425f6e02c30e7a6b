#include "diffract/linalg/gram_pair.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "diffract/core/nonfinite.hpp"
#include "diffract/linalg/backend.hpp"
#include "lapack_impl.hpp"

namespace diffract::linalg {
namespace {

// The products of the base, the model and their cross product in T (f64, or f32 under --precision f32:
// sgemm at twice dgemm's rate), the delta's always in f64 from its exact differences, so the delta fields
// are those of the f64 route in both.
template <typename T>
class CpuGramProducts final : public GramProducts {
public:
    CpuGramProducts(std::int64_t k, bool with_base)
        : k_(lapack::checked_int(k, "dimension")), with_base_(with_base) {
        const auto n = static_cast<std::size_t>(k * k);
        if (with_base_) bb_.assign(n, T(0));
        mm_.assign(n, T(0)), bm_.assign(n, T(0)), dd_.assign(n, 0.0);
    }
    void add(const double* b, const double* m, const double* d, std::int64_t len, bool short_side_rows,
             bool first) override {
        if constexpr (std::is_same_v<T, double>)
            accumulate(b, m, d, len, short_side_rows, first);
        else
            throw std::logic_error("f32 Gram products take f32 slabs");
    }
    void add_f32(const float* b, const float* m, const double* d, std::int64_t len, bool short_side_rows,
                 bool first) override {
        if constexpr (std::is_same_v<T, float>)
            accumulate(b, m, d, len, short_side_rows, first);
        else
            GramProducts::add_f32(b, m, d, len, short_side_rows, first);  // throws
    }
    void results(std::vector<double>& bb, std::vector<double>& mm, std::vector<double>& bm,
                 std::vector<double>& dd) override {
        bb = widened(bb_), mm = widened(mm_), bm = widened(bm_), dd = std::move(dd_);
    }

private:
    void accumulate(const T* b, const T* m, const double* d, std::int64_t len64, bool short_side_rows,
                    bool first) {
        const int k = k_, len = lapack::checked_int(len64, "dimension");
        // Row-major len × k is, column-major, Xᵀ with ld k (syrk 'N'); row-major k × len is X with
        // ld len (syrk 'T'). Either way the products are XᵀX and X_bᵀ X_m.
        const char* trans = short_side_rows ? "T" : "N";
        const int ld = short_side_rows ? len : k;
        const T one = 1, beta = first ? 0 : 1;
        const double one64 = 1, beta64 = first ? 0 : 1;
        if (with_base_) lapack::syrk("L", trans, &k, &len, &one, b, &ld, &beta, bb_.data(), &k);
        lapack::syrk("L", trans, &k, &len, &one, m, &ld, &beta, mm_.data(), &k);
        lapack::syrk("L", trans, &k, &len, &one64, d, &ld, &beta64, dd_.data(), &k);
        if (short_side_rows)
            lapack::gemm("T", "N", &k, &k, &len, &one, b, &ld, m, &ld, &beta, bm_.data(), &k);
        else
            lapack::gemm("N", "T", &k, &k, &len, &one, b, &ld, m, &ld, &beta, bm_.data(), &k);
    }
    static std::vector<double> widened(std::vector<T>& products) {
        if constexpr (std::is_same_v<T, double>) {
            return std::move(products);
        } else {
            std::vector<double> out(products.begin(), products.end());
            std::vector<T>().swap(products);
            return out;
        }
    }

    int k_;
    bool with_base_;
    std::vector<T> bb_, mm_, bm_;
    std::vector<double> dd_;
};

}  // namespace

void GramProducts::add_f32(const float*, const float*, const double*, std::int64_t, bool, bool) {
    throw std::logic_error("these Gram products take f64 slabs");
}

std::unique_ptr<GramProducts> cpu_gram_products(std::int64_t k, bool with_base) {
    return std::make_unique<CpuGramProducts<double>>(k, with_base);
}

std::unique_ptr<GramProducts> cpu_f32_gram_products(std::int64_t k, bool with_base) {
    return std::make_unique<CpuGramProducts<float>>(k, with_base);
}

GramPair::GramPair(std::int64_t k, bool with_base, Backend* backend)
    : k_(k),
      with_base_(with_base),
      products_(backend ? backend->gram_products(k, with_base) : cpu_gram_products(k, with_base)) {}

GramPair::GramPair(std::int64_t k, bool with_base, std::unique_ptr<GramProducts> f32_products)
    : k_(k), with_base_(with_base), f32_(true), products_(std::move(f32_products)) {
    if (!products_) throw std::invalid_argument("GramPair: no f32 products");
}

void GramPair::add(const Matrix<double>& b, const Matrix<double>& m, bool short_side_rows) {
    if (f32_) throw std::logic_error("GramPair::add: f64 slabs to f32 products");
    add_slabs(b, m, short_side_rows);
}

void GramPair::add(const Matrix<float>& b, const Matrix<float>& m, bool short_side_rows) {
    if (!f32_) throw std::logic_error("GramPair::add: f32 slabs to f64 products");
    add_slabs(b, m, short_side_rows);
}

// Norms and the delta in f64 whatever T is: f32 entries widen exactly, so y − x is exact.
template <typename T>
void GramPair::add_slabs(const Matrix<T>& b, const Matrix<T>& m, bool short_side_rows) {
    if (results_) throw std::logic_error("GramPair::add after its products were read");
    if (b.rows != m.rows || b.cols != m.cols || (short_side_rows ? b.rows : b.cols) != k_)
        throw std::invalid_argument("GramPair::add: slab shapes differ");
    const std::int64_t len = short_side_rows ? b.cols : b.rows;
    if (len == 0) return;
    delta_.resize(m.data.size());
    for (std::size_t i = 0; i < m.data.size(); ++i) {
        const double x = b.data[i], y = m.data[i], d = y - x;
        b2_ += x * x, m2_ += y * y, d2_ += d * d;
        delta_[i] = d;
        identical_ = identical_ && x == y;
    }
    if constexpr (std::is_same_v<T, float>)
        products_->add_f32(b.data.data(), m.data.data(), delta_.data(), len, short_side_rows, first_);
    else
        products_->add(b.data.data(), m.data.data(), delta_.data(), len, short_side_rows, first_);
    first_ = false;
}

GramPair::Products& GramPair::collected() {
    if (!results_) {
        results_ = std::make_unique<Products>();
        if (first_) {  // nothing was added: zero products
            const auto n = static_cast<std::size_t>(k_ * k_);
            if (with_base_) results_->bb.assign(n, 0.0);
            results_->mm.assign(n, 0.0), results_->bm.assign(n, 0.0), results_->dd.assign(n, 0.0);
        } else {
            products_->results(results_->bb, results_->mm, results_->bm, results_->dd);
        }
    }
    return *results_;
}

std::vector<double> symmetric_eigen(std::span<double> a, std::int64_t k64, bool vectors) {
    const int k = lapack::checked_int(k64, "dimension");
    std::vector<double> lambda(static_cast<std::size_t>(k));
    if (k == 0) return lambda;
    require_finite_lower_triangle(a, k64, "LAPACK syevd", "Gram matrix");
    const char* jobz = vectors ? "V" : "N";
    // Values only, from k = kTwoStageMinOrder up: the two-stage reduction (dense -> band with BLAS3,
    // then band -> tridiagonal in cache) instead of dsytrd's memory-bound symmetric matrix-vector
    // half. LAPACK's two-stage drivers have no eigenvectors, so those stay on dsyevd.
    const auto driver = !vectors && k >= kTwoStageMinOrder ? dsyevd_2stage_ : dsyevd_;
    int info = 0, lwork = -1, liwork = -1, iquery = 0;
    double query = 0;
    driver(jobz, "L", &k, a.data(), &k, lambda.data(), &query, &lwork, &iquery, &liwork, &info);
    lwork = static_cast<int>(query) + 1;
    liwork = iquery + 1;
    std::vector<double> work(static_cast<std::size_t>(lwork));
    std::vector<int> iwork(static_cast<std::size_t>(liwork));
    driver(jobz, "L", &k, a.data(), &k, lambda.data(), work.data(), &lwork, iwork.data(), &liwork, &info);
    if (info != 0)
        throw_numeric_error(fmt::format("LAPACK syevd failed on a {}x{} Gram matrix (info {})", k, k, info));
    return lambda;  // ascending
}

std::vector<double> multiply(std::span<const double> a, bool transpose_a, std::span<const double> b,
                             bool transpose_b, std::int64_t m64, std::int64_t n64, std::int64_t inner64) {
    const int m = lapack::checked_int(m64, "dimension"), n = lapack::checked_int(n64, "dimension"),
              inner = lapack::checked_int(inner64, "dimension");
    std::vector<double> c(static_cast<std::size_t>(m64 * n64));
    if (m == 0 || n == 0 || inner == 0) return c;
    const int lda = transpose_a ? inner : m, ldb = transpose_b ? n : inner;
    const double one = 1.0, zero = 0.0;
    dgemm_(transpose_a ? "T" : "N", transpose_b ? "T" : "N", &m, &n, &inner, &one, a.data(), &lda, b.data(),
           &ldb, &zero, c.data(), &m);
    return c;
}

}  // namespace diffract::linalg
