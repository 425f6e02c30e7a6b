#include "diffract/analysis/compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include <fmt/format.h>

#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/low_rank.hpp"
#include "diffract/core/mapped_file.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/linalg/gram_pair.hpp"

namespace diffract::analysis {
namespace {

constexpr double kEps = 1e-16;

// |x| of a row-major k × k vector, as a Matrix.
Matrix<double> abs_matrix(const std::vector<double>& x, std::int64_t k) {
    Matrix<double> o(k, k);
    std::transform(x.begin(), x.end(), o.data.begin(), [](double v) { return std::abs(v); });
    return o;
}

// |Aᵀ B| for row-major A, B (d × k): k × k row-major, O(i, j) = |a_i · b_j| (a = the base's vectors).
// A row-major d × k matrix is, column-major, its k × d transpose, so the column-major product
// Bᵀ·(Aᵀ)ᵀ = BᵀA = (AᵀB)ᵀ is AᵀB row-major.
Matrix<double> abs_overlap(const Matrix<double>& a, const Matrix<double>& b) {
    const std::int64_t k = a.cols;
    if (k == 0) return Matrix<double>(0, 0);
    return abs_matrix(linalg::multiply(b.data, false, a.data, true, k, k, a.rows), k);
}

double mean(const std::vector<double>& v, std::size_t from = 0) {
    if (from >= v.size()) return kNaN;
    double s = 0;
    for (std::size_t i = from; i < v.size(); ++i) s += v[i];
    return s / static_cast<double>(v.size() - from);
}

// Two-sample KS distance sup |F_a − F_b| between the empirical distributions of a and b.
double two_sample_ks(std::vector<double> a, std::vector<double> b) {
    if (a.empty() || b.empty()) return kNaN;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
    std::size_t i = 0, j = 0;
    double d = 0;
    while (i < a.size() && j < b.size()) {
        const double x = std::min(a[i], b[j]);
        while (i < a.size() && a[i] <= x) ++i;
        while (j < b.size() && b[j] <= x) ++j;
        d = std::max(d, std::abs(static_cast<double>(i) / na - static_cast<double>(j) / nb));
    }
    return d;
}

// The agreement fields of one side (l: U, d = rows; r: V, d = cols) from its overlap matrix
// O(i, j) = |base_i · model_j| (k × k, components ascending).
void add_agreement(const Matrix<double>& o, std::int64_t d, int top_k, const std::string& side,
                   FieldValues& out) {
    const auto k = static_cast<std::size_t>(o.cols);
    std::vector<double> diag(k), best(k);
    if (k > 0) {
        for (std::size_t i = 0; i < k; ++i) {
            const auto r = static_cast<std::int64_t>(i);
            diag[i] = o(r, r);
            double mx = 0;
            for (std::int64_t j = 0; j < o.cols; ++j) mx = std::max(mx, o(r, j));
            best[i] = mx;
        }
        const std::size_t t = std::min<std::size_t>(static_cast<std::size_t>(top_k), k), first = k - t;
        double topk_diag = 0, topk_best = 0;
        for (std::size_t i = first; i < k; ++i) {
            const auto r = static_cast<std::int64_t>(i);
            topk_diag += o(r, r);
            double mx = 0;
            for (auto j = static_cast<std::int64_t>(first); j < o.cols; ++j) mx = std::max(mx, o(r, j));
            topk_best += mx;
        }
        out.scalars["topk_avg_" + side + "_agreement"] = topk_diag / static_cast<double>(t);
        out.scalars["topk_avg_max_" + side + "_agreement"] = topk_best / static_cast<double>(t);
        const double dd = static_cast<double>(d);
        out.scalars["chance_" + side + "_agreement"] = 1.0 / std::sqrt(dd);
        out.scalars["chance_max_" + side + "_agreement"] =
            std::sqrt(2.0 * std::log(static_cast<double>(k)) / dd);
        out.scalars["chance_topk_max_" + side + "_agreement"] =
            std::sqrt(2.0 * std::log(static_cast<double>(t)) / dd);
    } else {
        for (const char* f : {"topk_avg_", "topk_avg_max_", "chance_", "chance_max_", "chance_topk_max_"})
            out.scalars[f + side + "_agreement"] = kNaN;
    }
    out.scalars["avg_" + side + "_agreement"] = mean(diag);
    out.scalars["avg_max_" + side + "_agreement"] = mean(best);
    out.vectors[side + "_agreement"] = std::move(diag);
    out.vectors["max_" + side + "_agreement"] = std::move(best);
}

// The spectral-invariance and agreement fields from the two spectra (ascending) and the overlaps of
// both sides.
FieldValues compare_spectra(const std::vector<double>& sb, const std::vector<double>& sm,
                            const Matrix<double>& l_overlap, const Matrix<double>& r_overlap,
                            std::int64_t rows, std::int64_t cols, int top_k) {
    FieldValues out;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < sb.size(); ++i) {
        const double d = sm[i] - sb[i];
        num += d * d, den += sb[i] * sb[i];
    }
    out.scalars["rel_sval_change"] = den > 0 ? std::sqrt(num) / std::sqrt(den) : (num > 0 ? kNaN : 0.0);
    const double n_greater = static_cast<double>(std::max(rows, cols));
    std::vector<double> esd_base(sb.size()), esd_model(sm.size());
    for (std::size_t i = 0; i < sb.size(); ++i) esd_base[i] = sb[i] * sb[i] / n_greater;
    for (std::size_t i = 0; i < sm.size(); ++i) esd_model[i] = sm[i] * sm[i] / n_greater;
    out.scalars["pl_ks"] = fit_power_law(esd_model).ks;
    out.scalars["esd_ks"] = two_sample_ks(std::move(esd_base), std::move(esd_model));
    const int t = std::max(1, top_k);
    add_agreement(l_overlap, rows, t, "l", out);
    add_agreement(r_overlap, cols, t, "r", out);
    out.scalars["top_k"] = static_cast<double>(std::min<std::size_t>(static_cast<std::size_t>(t), sb.size()));
    return out;
}

// The delta fields from ‖D‖_F and D's singular values (ascending).
void add_delta_values(double frob, const std::vector<double>& s, double base_frob_norm, FieldValues& out) {
    const double l2 = s.empty() ? 0.0 : s.back();
    double sum = 0;
    for (double v : s) sum += v;
    double entropy = 0;
    for (double v : s) {
        const double p = v / (sum + kEps);
        entropy -= p * std::log(p + kEps);
    }
    out.scalars["delta_frob_norm"] = frob;
    out.scalars["rel_delta_frob_norm"] = base_frob_norm > 0 ? frob / base_frob_norm : (frob > 0 ? kNaN : 0.0);
    out.scalars["delta_l2_norm"] = l2;
    out.scalars["delta_stable_rank"] = std::pow(frob / (l2 + kEps), 2);
    out.scalars["delta_effective_rank"] = std::exp(entropy);
    // Kept (ascending, as weights_svals) for the report's spectrum of each delta: no extra factorization.
    out.vectors["delta_svals"] = s;
}

}  // namespace

const std::vector<std::string>& compare_fields() {
    static const std::vector<std::string> f = {"delta_frob_norm",
                                               "rel_delta_frob_norm",
                                               "delta_l2_norm",
                                               "delta_stable_rank",
                                               "delta_effective_rank",
                                               "rel_sval_change",
                                               "esd_ks",
                                               "avg_l_agreement",
                                               "avg_max_l_agreement",
                                               "avg_r_agreement",
                                               "avg_max_r_agreement",
                                               "topk_avg_l_agreement",
                                               "topk_avg_max_l_agreement",
                                               "topk_avg_r_agreement",
                                               "topk_avg_max_r_agreement",
                                               "chance_l_agreement",
                                               "chance_max_l_agreement",
                                               "chance_topk_max_l_agreement",
                                               "chance_r_agreement",
                                               "chance_max_r_agreement",
                                               "chance_topk_max_r_agreement",
                                               "top_k",
                                               "pl_ks"};
    return f;
}

const std::vector<CompareFieldInfo>& compare_field_catalog() {
    static const std::vector<CompareFieldInfo> f = {
        {"delta_frob_norm", "‖W − W_base‖_F, summed from the entries in f64"},
        {"rel_delta_frob_norm", "delta_frob_norm / ‖W_base‖_F (0 when both are 0)"},
        {"delta_l2_norm", "σ_max(W − W_base)"},
        {"delta_stable_rank", "(delta_frob_norm / (delta_l2_norm + EPS))², EPS = 1e-16"},
        {"delta_effective_rank", "exp(−Σ pᵢ ln(pᵢ + EPS)), pᵢ = σᵢ / (Σσ + EPS) over the delta's values"},
        {"rel_sval_change", "‖σ − σ_base‖₂ / ‖σ_base‖₂, values ascending (spectral invariance)"},
        {"esd_ks", "two-sample KS distance sup|F − F_base| between the two ESDs (λ = σ²/N)"},
        {"avg_l_agreement", "mean of diag(O), O = |U_baseᵀ U| over all k components"},
        {"avg_max_l_agreement", "mean of the row-wise max of O = |U_baseᵀ U|"},
        {"avg_r_agreement", "mean of diag(|V_baseᵀ V|)"},
        {"avg_max_r_agreement", "mean of the row-wise max of |V_baseᵀ V|"},
        {"topk_avg_l_agreement", "avg_l_agreement over the top-k components of both (O's k × k corner)"},
        {"topk_avg_max_l_agreement", "avg_max_l_agreement over the top-k components of both"},
        {"topk_avg_r_agreement", "avg_r_agreement over the top-k components of both"},
        {"topk_avg_max_r_agreement", "avg_max_r_agreement over the top-k components of both"},
        {"chance_l_agreement", "1/√d_l, d_l = rows: diag(O) for unrelated bases"},
        {"chance_max_l_agreement", "√(2 ln k / d_l), k = min(rows, cols): the row max for unrelated bases"},
        {"chance_topk_max_l_agreement", "√(2 ln top_k / d_l): the row max within the top-k corner"},
        {"chance_r_agreement", "1/√d_r, d_r = cols"},
        {"chance_max_r_agreement", "√(2 ln k / d_r)"},
        {"chance_topk_max_r_agreement", "√(2 ln top_k / d_r)"},
        {"top_k", "the number of components of the topk_ fields: min(--top-k, k)"},
        {"pl_ks", "the model matrix's power-law KS distance (fit_power_law on its ESD)"},
        {"l_agreement", "vector: diag(|U_baseᵀ U|), stored, not in the CSV"},
        {"r_agreement", "vector: diag(|V_baseᵀ V|), stored, not in the CSV"},
        {"max_l_agreement", "vector: row-wise max of |U_baseᵀ U|, stored"},
        {"max_r_agreement", "vector: row-wise max of |V_baseᵀ V|, stored"},
        {"delta_svals", "vector: the delta's singular values, ascending, stored"}};
    return f;
}

const std::vector<std::string>& compare_vector_fields() {
    static const std::vector<std::string> f = {"l_agreement", "r_agreement", "max_l_agreement",
                                               "max_r_agreement", "delta_svals"};
    return f;
}

UnitChange unit_change(const std::map<std::string, double>& values) {
    return {.delta_frob_norm = values.at("delta_frob_norm"),
            .rel_delta_frob_norm = values.at("rel_delta_frob_norm"),
            .avg_l_agreement = values.at("avg_l_agreement"),
            .avg_r_agreement = values.at("avg_r_agreement"),
            .pl_ks = values.at("pl_ks")};
}

FieldValues compare_factorizations(const linalg::Svd& base, const linalg::Svd& model, std::int64_t rows,
                                   std::int64_t cols, int top_k) {
    if (base.s.size() != model.s.size() || base.u.rows != model.u.rows || base.v.rows != model.v.rows)
        throw std::invalid_argument("compare_factorizations: factorizations of different shapes");
    return compare_spectra(base.s, model.s, abs_overlap(base.u, model.u), abs_overlap(base.v, model.v), rows,
                           cols, top_k);
}

template <typename T>
void add_delta_fields(const Matrix<T>& delta, double base_frob_norm, linalg::Backend& backend,
                      linalg::SvdRoute route, FieldValues& out) {
    double s2 = 0;
    for (T v : delta.data) s2 += static_cast<double>(v) * static_cast<double>(v);
    add_delta_values(std::sqrt(s2), backend.singular_values(delta, route), base_frob_norm, out);
}

template <typename T>
FieldValues compare_matrices(const Matrix<T>& base, const Matrix<T>& model, int top_k,
                             linalg::Backend& backend, linalg::SvdRoute route) {
    if (base.rows != model.rows || base.cols != model.cols)
        throw InputError(fmt::format("compare: shapes differ (expected [{}, {}], found [{}, {}])", base.rows,
                                     base.cols, model.rows, model.cols));
    const auto sb = backend.svd(base);
    const auto sm = backend.svd(model);
    auto out = compare_factorizations(sb, sm, base.rows, base.cols, top_k);
    Matrix<T> delta = model;
    for (std::size_t i = 0; i < delta.data.size(); ++i) delta.data[i] -= base.data[i];
    double f2 = 0;
    for (double v : sb.s) f2 += v * v;
    add_delta_fields(delta, std::sqrt(f2), backend, route, out);
    return out;
}

template void add_delta_fields(const Matrix<float>&, double, linalg::Backend&, linalg::SvdRoute,
                               FieldValues&);
template void add_delta_fields(const Matrix<double>&, double, linalg::Backend&, linalg::SvdRoute,
                               FieldValues&);
template FieldValues compare_matrices(const Matrix<float>&, const Matrix<float>&, int, linalg::Backend&,
                                      linalg::SvdRoute);
template FieldValues compare_matrices(const Matrix<double>&, const Matrix<double>&, int, linalg::Backend&,
                                      linalg::SvdRoute);

std::string CompareSettings::config_key() const {
    const std::string_view route_name = name_of(linalg::kSvdRouteNames, route);
    // v2: the auto and gram routes stream both matrices through their Gram products (gram_pair.hpp).
    // "f32p": f32 results record the precision that served them (Bookkeeping::precision_bits). "f32c": the
    // Gram route's products in f32 where the guard keeps them (compare_streamed).
    return fmt::format("{};precision={};top_k={};route={}{}", kCompareConfigVersion,
                       precision == Precision::f32 ? "f32c" : "f64", top_k, route_name,
                       delta_only ? ";fields=delta" : "");
}

bool current_config(std::string_view config) {
    const auto version = config.substr(0, config.find(';'));
    return version == kKernelConfigVersion || version == kCompareConfigVersion;
}

bool f64_config(std::string_view config) { return config.find(";precision=f64;") != std::string_view::npos; }

namespace {

// A unit's orientation for streaming: the Gram side is the shorter logical side (k); slabs run
// along the longer one. `short_side_rows`: the logical rows are the short side.
struct Orientation {
    bool short_side_rows = false;
    std::int64_t k = 0, length = 0;
};

Orientation orientation(const MatrixBlock& b) {
    const bool rows_short = b.logical_rows() < b.logical_cols();
    return {rows_short, rows_short ? b.logical_rows() : b.logical_cols(),
            rows_short ? b.logical_cols() : b.logical_rows()};
}

// The sub-block of `b` covering logical long-side indices [start, start + len).
MatrixBlock long_side_slab(const MatrixBlock& b, const Orientation& o, std::int64_t start, std::int64_t len) {
    MatrixBlock s = b;
    // The long side is stored rows when (long side = logical rows) matches (logical rows = stored rows).
    if (o.short_side_rows == b.transposed)
        s.row0 += start, s.rows = len;
    else
        s.col0 += start, s.cols = len;
    return s;
}

// Long-side length of a slab of about `values` values (0: 2M, 16 MB in f64) per matrix.
std::int64_t slab_length(std::int64_t k, std::int64_t values = 0) {
    const std::int64_t target = values > 0 ? values : std::int64_t{1} << 21;
    return std::max<std::int64_t>(1, target / std::max<std::int64_t>(k, 1));
}

GramFactors factor_gram(std::vector<double>&& gram, std::int64_t k, double sq_norm, bool forced,
                        linalg::Backend& backend) {
    GramFactors f;
    f.vectors = std::move(gram);
    f.lambda = backend.symmetric_eigen(f.vectors, k, true);
    f.sq_norm = sq_norm;
    const double top = f.lambda.empty() ? 0.0 : f.lambda.back();
    f.trusted = forced || (top > 0 && f.lambda.front() >= linalg::kGramVectorGuard * top);
    return f;
}

std::vector<double> sqrt_clamped(const std::vector<double>& lambda) {
    std::vector<double> s(lambda.size());
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::sqrt(std::max(lambda[i], 0.0));
    return s;
}

// The whole-matrix route: both matrices read whole, thin SVDs for the vectors, the delta's values by
// `route`. Used for --svd-route gesdd and when the Gram route's vectors are not trusted.
template <typename T>
FieldValues compare_whole(const CompareSettings& c, const MatrixUnit& unit, const TensorInfo& mt,
                          BaseFactorization& cache, linalg::Backend& backend, linalg::SvdRoute delta_route) {
    const Matrix<T> bw = read_matrix<T>(*unit.tensor, unit.block);
    Matrix<T> mw = read_matrix<T>(mt, unit.block);
    if (!cache.svd) cache.svd = backend.svd(bw);
    // An identical matrix (a model compared with itself, an untouched tensor) shares the base's
    // factorization: agreement exactly 1, no SVD spent.
    const bool same = bw.data == mw.data;
    linalg::Svd own;
    if (!same) own = backend.svd(mw);
    auto fv = compare_factorizations(*cache.svd, same ? *cache.svd : own, bw.rows, bw.cols, c.top_k);
    fv.bookkeeping.whole_route = true;
    for (std::size_t i = 0; i < mw.data.size(); ++i) mw.data[i] -= bw.data[i];  // mw is now the delta
    double f2 = 0;
    for (double v : cache.svd->s) f2 += v * v;
    add_delta_fields(mw, std::sqrt(f2), backend, delta_route, fv);
    return fv;
}

// Y·V (length × c) or Yᵀ·U (k × c) for the long-side matrix Y (length × k) of a unit read whole as
// row-major `x` (logical rows × cols: Y itself, or Yᵀ when the short side is the rows), column-major
// V (k × c) and U (length × c).
std::vector<double> long_times(const Matrix<double>& x, bool short_side_rows, const std::vector<double>& v,
                               std::int64_t c, linalg::Backend& backend) {
    const std::int64_t k = short_side_rows ? x.rows : x.cols, length = short_side_rows ? x.cols : x.rows;
    return backend.multiply(x.data, !short_side_rows, v, false, length, c, k);
}
std::vector<double> long_transposed_times(const Matrix<double>& x, bool short_side_rows,
                                          const std::vector<double>& u, std::int64_t c,
                                          linalg::Backend& backend) {
    const std::int64_t k = short_side_rows ? x.rows : x.cols, length = short_side_rows ? x.cols : x.rows;
    return backend.multiply(x.data, short_side_rows, u, false, k, c, length);
}

// An untrusted factorization (λ_min under the guard) made trusted by recomputing its few components
// under the guard from the matrix `x` read whole (Backend::small_components: gesdd's accuracy for
// them). False when the backend cannot (many components under the guard, a singular factor): then
// the unit takes the whole-matrix route.
bool refine_small_end(GramFactors& f, const Matrix<double>& x, bool short_side_rows,
                      linalg::Backend& backend) {
    auto small = backend.small_components(x, f.lambda, linalg::kGramVectorGuard);
    if (!small || small->s.empty()) return false;
    const std::size_t p = small->s.size();
    for (std::size_t c = 0; c < p; ++c) f.lambda[c] = small->s[c] * small->s[c];
    std::copy(small->vectors.begin(), small->vectors.end(), f.vectors.begin());  // the first p columns
    f.long_vectors = long_times(x, short_side_rows, small->vectors, static_cast<std::int64_t>(p), backend);
    const std::size_t length = f.long_vectors.size() / p;
    for (std::size_t c = 0; c < p; ++c)
        for (std::size_t i = 0; i < length; ++i) f.long_vectors[i + c * length] /= small->s[c];
    f.refined = p;
    f.trusted = true;
    return true;
}

// The rows (base) and columns (model) of refined components in the long-side overlaps (row-major
// k × k, rows the base's components): u_b,iᵀu_m,j from the vectors themselves, since the cross
// product's error ε‖B‖‖M‖ is not small against σ_b,i·σ_m,j there. Row i: (Y_mᵀu_b,i)ᵀ v_m,j / σ_m,j;
// column j: v_b,iᵀ(Y_bᵀu_m,j) / σ_b,i; where both are refined, u_b,iᵀu_m,j. `read_base`/`read_model`
// read a matrix whole, one at a time.
template <typename ReadBase, typename ReadModel>
void refine_long_overlap(std::vector<double>& overlap, const GramFactors& b, const GramFactors& m,
                         const std::vector<double>& sb, const std::vector<double>& sm,
                         const ReadBase& read_base, const ReadModel& read_model, bool short_side_rows,
                         linalg::Backend& backend) {
    const auto k = static_cast<std::int64_t>(sb.size());
    const auto pb = static_cast<std::int64_t>(b.refined), pm = static_cast<std::int64_t>(m.refined);
    const auto at = [k](std::int64_t i, std::int64_t j) { return static_cast<std::size_t>(i * k + j); };
    if (pb > 0) {
        const auto z = long_transposed_times(read_model(), short_side_rows, b.long_vectors, pb, backend);
        const auto rows = backend.multiply(z, true, m.vectors, false, pb, k, k);  // pb × k, column-major
        for (std::int64_t j = 0; j < k; ++j)
            for (std::int64_t i = 0; i < pb; ++i)
                overlap[at(i, j)] =
                    rows[static_cast<std::size_t>(i + j * pb)] / sm[static_cast<std::size_t>(j)];
    }
    if (pm > 0) {
        const auto z = long_transposed_times(read_base(), short_side_rows, m.long_vectors, pm, backend);
        const auto cols = backend.multiply(b.vectors, true, z, false, k, pm, k);  // k × pm, column-major
        for (std::int64_t j = 0; j < pm; ++j)
            for (std::int64_t i = 0; i < k; ++i)
                overlap[at(i, j)] =
                    cols[static_cast<std::size_t>(i + j * k)] / sb[static_cast<std::size_t>(i)];
    }
    if (pb > 0 && pm > 0) {
        const auto length = static_cast<std::int64_t>(b.long_vectors.size()) / pb;
        const auto uu = backend.multiply(b.long_vectors, true, m.long_vectors, false, pb, pm, length);
        for (std::int64_t j = 0; j < pm; ++j)
            for (std::int64_t i = 0; i < pb; ++i)
                overlap[at(i, j)] = uu[static_cast<std::size_t>(i + j * pb)];
    }
}

// The Gram route (gram_pair.hpp): both matrices streamed slab by slab. A factorization whose λ_min is
// under the vector guard has its few small components recomputed from the matrix read whole
// (refine_small_end); only where that cannot be done does the unit fall back to compare_whole
// (route auto). The k × k buffers are released as soon as they are used: at most six are held at
// once (compare_streamed_bytes).
//
// --precision f32 (T = float): where the backend has f32 products (Backend::f32_gram_products: the CPU, for a
// unit at least kF32GramMinAspect times longer than short), BᵀB, MᵀM and BᵀM are formed in f32 from f32
// slabs and decomposed in f64, and kept when both spectra pass the f32 guard (linalg::f32_gram_kept); else
// the unit is streamed again in f64 (`try_f32` false). Measured within the f32 tier's contract on every
// field, agreements included (bench/f32_gram_routes.py). A base factorised from f32 products serves later
// models only through f32 products, so a row is computed in one precision, which it records.
// Stage 1: the unit's slabs streamed into the pair's k × k products (f32 slabs where the pair has f32
// products).
void stream_products(linalg::GramPair& pair, const MatrixUnit& unit, const TensorInfo& mt,
                     const Orientation& ori, std::int64_t slab_values) {
    const std::int64_t step = slab_length(ori.k, slab_values);
    for (std::int64_t start = 0; start < ori.length; start += step) {
        const auto slab = long_side_slab(unit.block, ori, start, std::min(step, ori.length - start));
        if (pair.f32())
            pair.add(read_matrix<float>(*unit.tensor, slab), read_matrix<float>(mt, slab),
                     ori.short_side_rows);
        else
            pair.add(read_matrix<double>(*unit.tensor, slab), read_matrix<double>(mt, slab),
                     ori.short_side_rows);
        // Unmap what was read (it stays in the page cache): resident memory stays at the k × k products.
        unit.tensor->release_pages();
        mt.release_pages();
    }
}

// What a factorization asks of the unit when it cannot serve: nothing (it serves), the unit again in f64
// (an f32 spectrum under the guard), or the whole-matrix route (a small end that cannot be refined).
enum class Fallback { none, again_in_f64, whole };

// Stage 2: one Gram product factorised (the base's, or the model's), kept only when it can serve.
template <typename ReadMatrix>
Fallback factor_into(std::optional<GramFactors>& out, std::vector<double>&& gram, double sq_norm, bool f32,
                     bool forced, const ReadMatrix& read, const Orientation& ori, linalg::Backend& backend) {
    out = factor_gram(std::move(gram), ori.k, sq_norm, forced, backend);
    out->f32 = f32;
    if (f32 && !linalg::f32_gram_kept(out->lambda)) return Fallback::again_in_f64;
    if (!out->trusted && !refine_small_end(*out, read(), ori.short_side_rows, backend))
        return Fallback::whole;
    return Fallback::none;
}

// Stage 3: the row-major |overlap| matrices of the two factorizations (rows the base's components), on
// the short side and on the long side.
template <typename ReadBase, typename ReadModel>
std::pair<Matrix<double>, Matrix<double>> overlaps(linalg::GramPair& pair, const GramFactors& b,
                                                   const GramFactors& m, const std::vector<double>& sb,
                                                   const std::vector<double>& sm, const ReadBase& read_base,
                                                   const ReadModel& read_model, const Orientation& ori,
                                                   linalg::Backend& backend) {
    const std::int64_t k = ori.k;
    if (pair.identical()) {
        // The same matrix factorised once: both overlaps are exactly the identity.
        Matrix<double> identity(k, k);
        for (std::int64_t i = 0; i < k; ++i) identity(i, i) = 1.0;
        return {identity, identity};
    }
    // Computed transposed, so that the column-major products are the row-major overlaps. Short
    // side: (V_bᵀ V_m)ᵀ = V_mᵀ V_b. Long side: (V_bᵀ (BᵀM) V_m)ᵀ = ((BᵀM) V_m)ᵀ V_b, over σ_b,i σ_m,j.
    auto short_overlap = backend.multiply(m.vectors, true, b.vectors, false, k, k, k);
    auto long_overlap = [&] {
        const auto cross_model = backend.multiply(pair.cross(), false, m.vectors, false, k, k, k);
        std::vector<double>().swap(pair.cross());
        return backend.multiply(cross_model, true, b.vectors, false, k, k, k);
    }();
    for (std::int64_t i = 0; i < k; ++i)
        for (std::int64_t j = 0; j < k; ++j) {
            const double scale = sb[static_cast<std::size_t>(i)] * sm[static_cast<std::size_t>(j)];
            auto& x = long_overlap[static_cast<std::size_t>(i * k + j)];
            x = scale > 0 ? x / scale : 0.0;
        }
    if (b.refined > 0 || m.refined > 0)
        refine_long_overlap(long_overlap, b, m, sb, sm, read_base, read_model, ori.short_side_rows, backend);
    auto short_rows = abs_matrix(short_overlap, k);
    std::vector<double>().swap(short_overlap);  // five k × k at most, as in the product above
    return {std::move(short_rows), abs_matrix(long_overlap, k)};
}

// The Gram route (gram_pair.hpp): both matrices streamed slab by slab. A factorization whose λ_min is
// under the vector guard has its few small components recomputed from the matrix read whole
// (refine_small_end); only where that cannot be done does the unit fall back to compare_whole
// (route auto). The k × k buffers are released as soon as they are used: at most six are held at
// once (compare_streamed_bytes).
//
// --precision f32 (T = float): where the backend has f32 products (Backend::f32_gram_products: the CPU, for a
// unit at least kF32GramMinAspect times longer than short), BᵀB, MᵀM and BᵀM are formed in f32 from f32
// slabs and decomposed in f64, and kept when both spectra pass the f32 guard (linalg::f32_gram_kept); else
// the unit is streamed again in f64 (`try_f32` false). Measured within the f32 tier's contract on every
// field, agreements included (bench/f32_gram_routes.py). A base factorised from f32 products serves later
// models only through f32 products, so a row is computed in one precision, which it records.
//
// The stages: the products (stream_products), the delta's values, the base's factorization (cached
// across models) and the model's (factor_into), the overlaps, the fields.
template <typename T>
FieldValues compare_streamed(const CompareSettings& c, const MatrixUnit& unit, const TensorInfo& mt,
                             BaseFactorization& cache, linalg::Backend& backend, bool try_f32 = true) {
    const bool forced = c.route == linalg::SvdRoute::gram;
    const auto whole = [&] {
        return compare_whole<T>(c, unit, mt, cache, backend, linalg::SvdRoute::auto_route);
    };
    // The base's small end could not be refined with an earlier model: nothing to stream.
    if (cache.gram && !cache.gram->trusted) return whole();
    const Orientation ori = orientation(unit.block);
    const std::int64_t k = ori.k;
    std::unique_ptr<linalg::GramProducts> f32_products;
    if (std::is_same_v<T, float> && try_f32 && (!cache.gram || cache.gram->f32))
        f32_products = backend.f32_gram_products(k, ori.length, !cache.gram);
    auto pair = f32_products ? linalg::GramPair(k, !cache.gram, std::move(f32_products))
                             : linalg::GramPair(k, !cache.gram, &backend);
    // This unit again from f64 slabs, with an f64 base: after an f32 spectrum under the guard, and for an
    // f64 unit whose base was factorised from f32 products.
    const auto again_in_f64 = [&] {
        if (cache.gram && cache.gram->f32) cache.gram.reset();
        return compare_streamed<T>(c, unit, mt, cache, backend, false);
    };
    const auto fall_back = [&](Fallback f) { return f == Fallback::again_in_f64 ? again_in_f64() : whole(); };
    if (!pair.f32() && cache.gram && cache.gram->f32) return again_in_f64();
    stream_products(pair, unit, mt, ori, c.slab_values);
    // The delta's values first, so that its product is gone before the decompositions with vectors.
    const auto delta_s = sqrt_clamped(backend.symmetric_eigen(pair.delta_gram(), k, false));
    std::vector<double>().swap(pair.delta_gram());

    const auto read_base = [&unit] { return read_matrix<double>(*unit.tensor, unit.block); };
    const auto read_model = [&unit, &mt] { return read_matrix<double>(mt, unit.block); };
    if (!cache.gram) {
        const auto f = factor_into(cache.gram, std::move(pair.base_gram()), pair.base_sq_norm(), pair.f32(),
                                   forced, read_base, ori, backend);
        if (f != Fallback::none) return fall_back(f);
    }
    const GramFactors& b = *cache.gram;
    std::optional<GramFactors> own;
    if (!pair.identical()) {
        const auto f = factor_into(own, std::move(pair.model_gram()), pair.model_sq_norm(), pair.f32(),
                                   forced, read_model, ori, backend);
        if (f != Fallback::none) return fall_back(f);
    }
    const GramFactors& m = own ? *own : b;

    const auto sb = sqrt_clamped(b.lambda), sm = sqrt_clamped(m.lambda);
    const auto [short_rows, long_rows] = overlaps(pair, b, m, sb, sm, read_base, read_model, ori, backend);
    const std::int64_t rows = unit.block.logical_rows(), cols = unit.block.logical_cols();
    auto fv = ori.short_side_rows ? compare_spectra(sb, sm, short_rows, long_rows, rows, cols, c.top_k)
                                  : compare_spectra(sb, sm, long_rows, short_rows, rows, cols, c.top_k);
    add_delta_values(std::sqrt(pair.delta_sq_norm()), delta_s, std::sqrt(b.sq_norm), fv);
    fv.bookkeeping.precision_bits = pair.f32() ? 32 : 64;
    return fv;
}

// Whether two tensor views hold the same stored bytes (the same file, by identity, and range).
bool same_stored_tensor(const TensorInfo& a, const TensorInfo& b) {
    if (a.offset != b.offset || a.nbytes != b.nbytes || a.dtype != b.dtype || a.shape != b.shape ||
        a.rope_head_rows != b.rope_head_rows)
        return false;
    if (a.file == b.file) return true;
    const auto &ia = a.file->identity(), &ib = b.file->identity();
    return ia && ib && *ia == *ib;
}

// --delta-only: the delta fields alone (the others NaN). For a factored delta (factored_delta) the
// unit's block is l·r (p × r times r × q, read_low_rank_block): with the thin SVD l = U S Vᵀ
// (O(p r²)) its singular values are those of S Vᵀ r (k × q, k = min(p, r); O(q r²)), its Frobenius
// norm that of S Vᵀ r's entries: never an m × n product, and exact for every head block. It is the
// adapter's own update, not the difference of the merged tensor's rounded bytes and the base.
template <typename T>
FieldValues compare_delta(const CompareSettings& c, const MatrixUnit& unit, const TensorInfo& mt,
                          linalg::Backend& backend) {
    FieldValues fv;
    for (const auto& f : compare_fields()) fv.scalars[f] = kNaN;
    for (const auto& f : compare_vector_fields()) fv.vectors[f] = {};
    fv.bookkeeping.whole_route = false;
    if (same_stored_tensor(*unit.tensor, mt)) {  // an untouched tensor: the delta is 0, nothing is read
        const auto k = std::min(unit.block.rows, unit.block.cols);
        add_delta_values(0.0, std::vector<double>(static_cast<std::size_t>(k), 0.0), 1.0, fv);
        return fv;
    }
    if (factored_delta(c, *unit.tensor, mt)) {
        const auto base = read_matrix<double>(*unit.tensor, unit.block);
        double b2 = 0;
        for (double v : base.data) b2 += v * v;
        const auto f = read_low_rank_block(*mt.low_rank, unit.block);
        const auto l = backend.svd(f.l);
        const auto k = static_cast<std::int64_t>(l.s.size()), r = f.r.rows, q = f.r.cols;
        Matrix<double> core(k, q);  // S Vᵀ r
        for (std::int64_t i = 0; i < k; ++i)
            for (std::int64_t t = 0; t < r; ++t) {
                const double w = l.s[static_cast<std::size_t>(i)] * l.v(t, i);
                for (std::int64_t j = 0; j < q; ++j) core(i, j) += w * f.r(t, j);
            }
        double d2 = 0;
        for (double v : core.data) d2 += v * v;
        add_delta_values(std::sqrt(d2), backend.singular_values(core, linalg::SvdRoute::gesdd), std::sqrt(b2),
                         fv);
        return fv;
    }
    const Matrix<T> base = read_matrix<T>(*unit.tensor, unit.block);
    Matrix<T> delta = read_matrix<T>(mt, unit.block);
    double b2 = 0;
    for (std::size_t i = 0; i < delta.data.size(); ++i) {
        b2 += static_cast<double>(base.data[i]) * static_cast<double>(base.data[i]);
        delta.data[i] -= base.data[i];
    }
    add_delta_fields(delta, std::sqrt(b2), backend, linalg::SvdRoute::gesdd, fv);
    fv.bookkeeping.whole_route = true;
    return fv;
}

}  // namespace

bool factored_delta(const CompareSettings& settings, const TensorInfo& base, const TensorInfo& model) {
    return settings.delta_only && model.low_rank && same_stored_tensor(model.low_rank->base, base);
}

template <typename T>
FieldValues compare_unit(const CompareSettings& c, const MatrixUnit& unit, const TensorInfo& mt,
                         BaseFactorization& cache, linalg::Backend& backend) {
    const TensorScope scope(mt.path(), mt.name);  // a failing factorisation names the model's tensor
    if (c.delta_only) return compare_delta<T>(c, unit, mt, backend);
    auto fv = c.route == linalg::SvdRoute::gesdd
                  ? compare_whole<T>(c, unit, mt, cache, backend, linalg::SvdRoute::gesdd)
                  : compare_streamed<T>(c, unit, mt, cache, backend);
    auto& book = fv.bookkeeping;
    if (!book.whole_route) book.whole_route = false;
    // The whole-matrix route (gesdd, and --delta-only's differences) computes in the entries' own
    // precision; the Gram route says which products it kept (compare_streamed), and decomposes in f64.
    if (!book.precision_bits) book.precision_bits = std::is_same_v<T, float> && *book.whole_route ? 32 : 64;
    return fv;
}

template FieldValues compare_unit<float>(const CompareSettings&, const MatrixUnit&, const TensorInfo&,
                                         BaseFactorization&, linalg::Backend&);
template FieldValues compare_unit<double>(const CompareSettings&, const MatrixUnit&, const TensorInfo&,
                                          BaseFactorization&, linalg::Backend&);

namespace {

// A unit whose blocks hold NaN/Inf entries: never factorised, every field NaN.
FieldValues nonfinite_compare_values() {
    FieldValues fv;
    for (const auto& f : compare_fields()) fv.scalars[f] = kNaN;
    for (const auto& f : compare_vector_fields()) fv.vectors[f] = {};
    fv.bookkeeping.whole_route = false;
    return fv;
}

// The two matrices, the base's factorization, and one model SVD in flight (LAPACK's copies and
// workspace plus the f64 result).
std::uint64_t compare_whole_bytes(const MatrixBlock& b, bool f64) {
    const auto m = static_cast<std::uint64_t>(b.logical_rows()),
               n = static_cast<std::uint64_t>(b.logical_cols());
    const std::uint64_t s = f64 ? 8 : 4, k = std::min(m, n);
    const std::uint64_t held = 2 * s * m * n + 16 * (m + n) * k;
    return held + s * (m * n + (m + n) * k + 4 * k * k) + 8 * ((m + n) * k + k * k);
}

// At most six k × k f64 matrices at once (compare_streamed: four products while streaming; three,
// two factorizations and syevd's 2k² workspace; two factors, the cross product, its product with the
// model's vectors and the two overlaps), three slabs, and for refining a small end the matrix read
// whole and its triangular factor's copy (2mn f64; one matrix whole at a time), with `refining`.
std::uint64_t compare_streamed_bytes(const MatrixBlock& b, bool refining) {
    const auto o = orientation(b);
    const auto k = static_cast<std::uint64_t>(o.k), n = static_cast<std::uint64_t>(o.length);
    const auto slab = static_cast<std::uint64_t>(std::min(slab_length(o.k), o.length));
    return 8 * (6 * k * k + 3 * slab * k + (refining ? 2 * k * n : 0));
}

}  // namespace

std::uint64_t tensor_job_bytes(const TensorJob& job, const CompareSettings& settings, std::uint64_t budget) {
    const bool f64 = settings.precision == Precision::f64;
    std::uint64_t most = 0;
    for (const auto& u : job.units) {
        std::uint64_t b = 0;
        if (settings.route == linalg::SvdRoute::gesdd || settings.delta_only) {
            b = compare_whole_bytes(u.block, f64);
        } else {
            b = compare_streamed_bytes(u.block, true);
            if (b > budget) b = compare_streamed_bytes(u.block, false);
        }
        most = std::max(most, b);
    }
    return most;
}

void compare_tensor_job(const CompareSettings& s, const TensorJob& job, const WantedUnit& wanted,
                        const DoneUnit& done, linalg::Backend& backend) {
    const bool f64 = s.precision == Precision::f64;
    const auto& base = *job.tensor;
    std::vector<BaseFactorization> cache(job.units.size());
    std::optional<bool> base_clean;
    for (std::size_t m = 0; m < job.in_model.size(); ++m) {
        bool any = false;
        std::optional<bool> model_clean;
        for (std::size_t u = 0; u < job.units.size(); ++u) {
            if (!wanted(m, u)) continue;
            any = true;
            const auto& unit = job.units[u];
            const auto& mt = *job.in_model[m];
            if (!base_clean) base_clean = count_nonfinite(base, f64) == 0;
            // A factored delta's merged tensor is never formed: its base and factors are checked.
            if (!model_clean)
                model_clean = factored_delta(s, base, mt)
                                  ? *base_clean && count_nonfinite(mt.low_rank->a, f64) == 0 &&
                                        count_nonfinite(mt.low_rank->b, f64) == 0
                                  : count_nonfinite(mt, f64) == 0;
            const auto bad = *base_clean && *model_clean ? NonfinitePair{}
                                                         : count_nonfinite_pair(base, mt, unit.block, f64);
            auto fv = bad.either > 0 ? nonfinite_compare_values()
                      : f64          ? compare_unit<double>(s, unit, mt, cache[u], backend)
                                     : compare_unit<float>(s, unit, mt, cache[u], backend);
            auto& book = fv.bookkeeping;
            book.nonfinite_count = bad.either;
            book.nonfinite_base = bad.first;
            book.nonfinite_model = bad.second;
            // A unit never factorised: its entries' precision.
            if (!book.precision_bits) book.precision_bits = f64 ? 64 : 32;
            done(m, u, std::move(fv));
        }
        // This model's pages are no longer needed by this thread: keep resident memory small.
        if (any) job.in_model[m]->release_pages();
    }
    base.release_pages();
}

}  // namespace diffract::analysis
