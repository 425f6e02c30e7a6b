#include "diffract/analysis/compare.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/core/atomic_file.hpp"
#include "diffract/core/csv_field.hpp"
#include "diffract/core/distributed.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/low_rank.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/core/parallel.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/formats/memory_checkpoint.hpp"
#include "diffract/linalg/gram_pair.hpp"
#include "diffract/store/content_id.hpp"
#include "diffract/store/store.hpp"
#include "field_values_io_impl.hpp"
#include "nonfinite_report_impl.hpp"

namespace diffract::analysis {
namespace {

constexpr double kEps = 1e-16;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// |Aᵀ B| for row-major A, B (d × k): k × k row-major, O(i, j) = |a_i · b_j| (a = the base's vectors).
// A row-major d × k matrix is, column-major, its k × d transpose: Aᵀ · (Bᵀ)ᵀ = AᵀB, column-major.
Matrix<double> abs_overlap(const Matrix<double>& a, const Matrix<double>& b) {
    const std::int64_t k = a.cols;
    Matrix<double> o(k, k);
    if (k == 0) return o;
    const auto c = linalg::multiply(a.data, false, b.data, true, k, k, a.rows);
    for (std::int64_t i = 0; i < k; ++i)
        for (std::int64_t j = 0; j < k; ++j) o(i, j) = std::abs(c[static_cast<std::size_t>(i + j * k)]);
    return o;
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

std::string geometry_string(const model::HeadGeometry& g) {
    return fmt::format("{} heads / {} kv heads / head_dim {}", g.n_heads, g.n_kv_heads, g.head_dim);
}

int projection_index(const std::string& role) {
    if (role == "attn_q") return 0;
    if (role == "attn_k") return 1;
    if (role == "attn_v") return 2;
    if (role == "attn_o") return 3;
    return -1;
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

const std::vector<std::string>& compare_vector_fields() {
    static const std::vector<std::string> f = {"l_agreement", "r_agreement", "max_l_agreement",
                                               "max_r_agreement", "delta_svals"};
    return f;
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

std::string CompareOptions::config_key() const {
    const char* route_name =
        route == linalg::SvdRoute::gesdd ? "gesdd" : (route == linalg::SvdRoute::gram ? "gram" : "auto");
    // v2: the auto and gram routes stream both matrices through their Gram products (gram_pair.hpp).
    return fmt::format("compare-v2;precision={};top_k={};route={}{}",
                       precision == Precision::f32 ? "f32" : "f64", top_k, route_name,
                       delta_only ? ";fields=delta" : "");
}

namespace {

// One tensor of the base with its units, and where it is in each model.
struct TensorJob {
    const TensorInfo* tensor = nullptr;
    std::vector<MatrixUnit> units;
    std::vector<const TensorInfo*> in_model;  // per model; null: skipped
    std::vector<char> heads_ok;               // per model: head blocks compared
};

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

// The base's side of a unit on the Gram route: σ², the short-side vectors (column-major k × k).
struct GramFactors {
    std::vector<double> lambda, vectors;
    double sq_norm = 0;
    bool trusted = false;  // λ_min ≥ kGramVectorGuard·λ_max (or the route is forced)
};

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

// Column-major k × k C → row-major |C| (overlap rows = the base's components).
Matrix<double> abs_rows(const std::vector<double>& c, std::int64_t k) {
    Matrix<double> o(k, k);
    for (std::int64_t i = 0; i < k; ++i)
        for (std::int64_t j = 0; j < k; ++j) o(i, j) = std::abs(c[static_cast<std::size_t>(i + j * k)]);
    return o;
}

// Per job and unit, what the models share: the base's factorization on either route.
struct BaseCache {
    std::optional<GramFactors> gram;
    std::optional<linalg::Svd> svd;
};

struct Context {
    const CompareOptions& o;
    const formats::Checkpoint& base;
    const std::vector<formats::Checkpoint>& models;
};

// Which route computed a unit travels with its values (not a CSV column): 1 = whole matrices.
constexpr const char* kWholeRouteField = "whole_route";

// The whole-matrix route: both matrices read whole, thin SVDs for the vectors, the delta's values by
// `route`. Used for --svd-route gesdd and when the Gram route's vectors are not trusted.
template <typename T>
FieldValues compare_whole(const Context& c, const MatrixUnit& unit, const TensorInfo& mt, BaseCache& cache,
                          linalg::Backend& backend, linalg::SvdRoute delta_route) {
    const Matrix<T> bw = read_matrix<T>(*unit.tensor, unit.block);
    Matrix<T> mw = read_matrix<T>(mt, unit.block);
    if (!cache.svd) cache.svd = backend.svd(bw);
    // An identical matrix (a model compared with itself, an untouched tensor) shares the base's
    // factorization: agreement exactly 1, no SVD spent.
    const bool same = bw.data == mw.data;
    linalg::Svd own;
    if (!same) own = backend.svd(mw);
    auto fv = compare_factorizations(*cache.svd, same ? *cache.svd : own, bw.rows, bw.cols, c.o.top_k);
    fv.scalars[kWholeRouteField] = 1.0;
    for (std::size_t i = 0; i < mw.data.size(); ++i) mw.data[i] -= bw.data[i];  // mw is now the delta
    double f2 = 0;
    for (double v : cache.svd->s) f2 += v * v;
    add_delta_fields(mw, std::sqrt(f2), backend, delta_route, fv);
    return fv;
}

// The Gram route (gram_pair.hpp): both matrices streamed slab by slab, never held whole. Falls back
// to compare_whole when a factorization's vectors are not trusted (route auto).
template <typename T>
FieldValues compare_streamed(const Context& c, const MatrixUnit& unit, const TensorInfo& mt, BaseCache& cache,
                             linalg::Backend& backend) {
    const bool forced = c.o.route == linalg::SvdRoute::gram;
    const Orientation ori = orientation(unit.block);
    const std::int64_t k = ori.k;
    linalg::GramPair pair(k, !cache.gram, &backend);
    const std::int64_t step = slab_length(k, c.o.slab_values);
    for (std::int64_t start = 0; start < ori.length; start += step) {
        const auto slab = long_side_slab(unit.block, ori, start, std::min(step, ori.length - start));
        pair.add(read_matrix<double>(*unit.tensor, slab), read_matrix<double>(mt, slab), ori.short_side_rows);
        // Unmap what was read (it stays in the page cache): resident memory stays at the k × k products.
        unit.tensor->file->dont_need(unit.tensor->offset, unit.tensor->nbytes);
        mt.file->dont_need(mt.offset, mt.nbytes);
    }
    if (!cache.gram)
        cache.gram = factor_gram(std::move(pair.base_gram()), k, pair.base_sq_norm(), forced, backend);
    const GramFactors& b = *cache.gram;
    std::optional<GramFactors> own;
    if (!pair.identical())
        own = factor_gram(std::move(pair.model_gram()), k, pair.model_sq_norm(), forced, backend);
    const GramFactors& m = own ? *own : b;
    if (!b.trusted || !m.trusted)
        return compare_whole<T>(c, unit, mt, cache, backend, linalg::SvdRoute::auto_route);

    const auto sb = sqrt_clamped(b.lambda), sm = sqrt_clamped(m.lambda);
    Matrix<double> short_rows(k, k), long_rows(k, k);
    if (pair.identical()) {
        // The same matrix factorised once: both overlaps are exactly the identity.
        for (std::int64_t i = 0; i < k; ++i) short_rows(i, i) = long_rows(i, i) = 1.0;
    } else {
        // Short side: V_bᵀ V_m. Long side: (V_bᵀ (BᵀM) V_m)_ij / (σ_b,i σ_m,j).
        const auto short_overlap = backend.multiply(b.vectors, true, m.vectors, false, k, k, k);
        auto long_overlap = backend.multiply(b.vectors, true,
                                             backend.multiply(pair.cross(), false, m.vectors, false, k, k, k),
                                             false, k, k, k);
        for (std::int64_t j = 0; j < k; ++j)
            for (std::int64_t i = 0; i < k; ++i) {
                const double scale = sb[static_cast<std::size_t>(i)] * sm[static_cast<std::size_t>(j)];
                auto& x = long_overlap[static_cast<std::size_t>(i + j * k)];
                x = scale > 0 ? x / scale : 0.0;
            }
        short_rows = abs_rows(short_overlap, k), long_rows = abs_rows(long_overlap, k);
    }
    const std::int64_t rows = unit.block.logical_rows(), cols = unit.block.logical_cols();
    auto fv = ori.short_side_rows ? compare_spectra(sb, sm, short_rows, long_rows, rows, cols, c.o.top_k)
                                  : compare_spectra(sb, sm, long_rows, short_rows, rows, cols, c.o.top_k);
    add_delta_values(std::sqrt(pair.delta_sq_norm()),
                     sqrt_clamped(backend.symmetric_eigen(pair.delta_gram(), k, false)), std::sqrt(b.sq_norm),
                     fv);
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

// --delta-only on a model tensor that is this base tensor plus a low-rank update (a LoRA adapter on
// this base): the delta is the update itself, computed from its factors.
bool factored_delta(const CompareOptions& o, const TensorInfo& base, const TensorInfo& model) {
    return o.delta_only && model.low_rank && same_stored_tensor(model.low_rank->base, base);
}

// --delta-only: the delta fields alone (the others NaN). For a factored delta (factored_delta) the
// unit's block is l·r (p × r times r × q, read_low_rank_block): with the thin SVD l = U S Vᵀ
// (O(p r²)) its singular values are those of S Vᵀ r (k × q, k = min(p, r); O(q r²)), its Frobenius
// norm that of S Vᵀ r's entries: never an m × n product, and exact for every head block. It is the
// adapter's own update, not the difference of the merged tensor's rounded bytes and the base.
template <typename T>
FieldValues compare_delta(const Context& c, const MatrixUnit& unit, const TensorInfo& mt,
                          linalg::Backend& backend) {
    FieldValues fv;
    for (const auto& f : compare_fields()) fv.scalars[f] = kNaN;
    for (const auto& f : compare_vector_fields()) fv.vectors[f] = {};
    fv.scalars[kWholeRouteField] = 0.0;
    if (same_stored_tensor(*unit.tensor, mt)) {  // an untouched tensor: the delta is 0, nothing is read
        const auto k = std::min(unit.block.rows, unit.block.cols);
        add_delta_values(0.0, std::vector<double>(static_cast<std::size_t>(k), 0.0), 1.0, fv);
        return fv;
    }
    if (factored_delta(c.o, *unit.tensor, mt)) {
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
    fv.scalars[kWholeRouteField] = 1.0;
    return fv;
}

template <typename T>
FieldValues compare_unit(const Context& c, const MatrixUnit& unit, const TensorInfo& mt, BaseCache& cache,
                         linalg::Backend& backend) {
    const TensorScope scope(mt.path(), mt.name);  // a failing factorisation names the model's tensor
    if (c.o.delta_only) return compare_delta<T>(c, unit, mt, backend);
    auto fv = c.o.route == linalg::SvdRoute::gesdd
                  ? compare_whole<T>(c, unit, mt, cache, backend, linalg::SvdRoute::gesdd)
                  : compare_streamed<T>(c, unit, mt, cache, backend);
    fv.scalars.try_emplace(kWholeRouteField, 0.0);
    return fv;
}

// The stored per-side counts of NaN/Inf entries (the warnings name the files), besides
// kNonfiniteCountField (positions where either block has one). Not CSV columns.
constexpr const char* kNonfiniteBaseField = "nonfinite_base";
constexpr const char* kNonfiniteModelField = "nonfinite_model";

const std::vector<std::string>& stored_fields() {
    static const std::vector<std::string> f = [] {
        auto v = compare_fields();
        // delta_svals too: a result stored before it was kept is computed again (once), so the report's
        // delta-spectrum figure is never missing a unit that compare has.
        v.insert(v.end(), {kNonfiniteCountField, kNonfiniteBaseField, kNonfiniteModelField, "delta_svals"});
        return v;
    }();
    return f;
}

// A unit whose blocks hold NaN/Inf entries: never factorised, every field NaN.
FieldValues nonfinite_compare_values() {
    FieldValues fv;
    for (const auto& f : compare_fields()) fv.scalars[f] = kNaN;
    for (const auto& f : compare_vector_fields()) fv.vectors[f] = {};
    fv.scalars[kWholeRouteField] = 0.0;
    return fv;
}

void set_nonfinite_counts(const NonfinitePair& n, FieldValues& fv) {
    fv.scalars[kNonfiniteCountField] = static_cast<double>(n.either);
    fv.scalars[kNonfiniteBaseField] = static_cast<double>(n.first);
    fv.scalars[kNonfiniteModelField] = static_cast<double>(n.second);
}

// Peak working memory of one unit on the whole-matrix route: the two matrices, the base's
// factorization, and one model SVD in flight (LAPACK's copies and workspace plus the f64 result).
std::uint64_t whole_bytes(const MatrixBlock& b, bool f64) {
    const auto m = static_cast<std::uint64_t>(b.logical_rows()),
               n = static_cast<std::uint64_t>(b.logical_cols());
    const std::uint64_t s = f64 ? 8 : 4, k = std::min(m, n);
    const std::uint64_t held = 2 * s * m * n + 16 * (m + n) * k;
    return held + s * (m * n + (m + n) * k + 4 * k * k) + 8 * ((m + n) * k + k * k);
}

// On the Gram route: four k × k products, two factorizations and the overlap products (about ten
// k × k f64 matrices), syevd's workspace, and three slabs.
std::uint64_t streamed_bytes(const MatrixBlock& b) {
    const auto o = orientation(b);
    const auto k = static_cast<std::uint64_t>(o.k);
    const auto slab = static_cast<std::uint64_t>(std::min(slab_length(o.k), o.length));
    return 8 * (12 * k * k + 3 * slab * k);
}

// A job's reservation: its largest unit (units run one after another). On the auto route the
// whole-matrix fallback is reserved too when it fits the budget at all; a tall matrix whose fallback
// cannot fit is reserved at its streamed size (its vectors are trusted in practice: see docs/compare.md).
std::uint64_t job_bytes(const TensorJob& job, bool f64, linalg::SvdRoute route, std::uint64_t budget) {
    std::uint64_t most = 0;
    for (const auto& u : job.units) {
        const std::uint64_t whole = whole_bytes(u.block, f64), streamed = streamed_bytes(u.block);
        std::uint64_t b = streamed;
        if (route == linalg::SvdRoute::gesdd || (route == linalg::SvdRoute::auto_route && whole <= budget))
            b = std::max(b, whole);
        most = std::max(most, b);
    }
    return most;
}

}  // namespace

CompareResult compare(const CompareOptions& o) {
    if (o.top_k < 1)
        throw InputError(fmt::format("--top-k: expected a positive number of components, found {}", o.top_k));
    if (o.delta_only && (o.ranking.order == HeadOrder::agreement || o.ranking.order == HeadOrder::pl_ks))
        throw InputError(fmt::format("--order {}: the heads' {} is not computed with --delta-only",
                                     head_order_name(o.ranking.order), head_order_name(o.ranking.order)));
    CompareResult result;
    result.ranking = o.ranking;
    result.allow_partial = o.allow_partial;
    const auto base = formats::open_model(o.base);
    std::vector<formats::Checkpoint> models;
    for (const auto& spec : o.models) models.push_back(formats::open_model(spec));
    int ref_index = -1;
    if (!o.reference.empty()) {
        models.push_back(formats::open_model(o.reference));
        ref_index = static_cast<int>(models.size()) - 1;
    }
    if (models.empty())
        throw InputError("compare: give at least one model (or --reference) to compare with the base");
    const std::size_t n_models = models.size();

    // Under MPI only rank 0 touches the store; the other ranks compute their share and send it.
    const auto& dist = distributed();
    if (dist.is_root()) {
        std::vector<formats::Checkpoint> inputs{base};
        inputs.insert(inputs.end(), models.begin(), models.end());
        check_run_output(o.run, inputs);
    }
    std::optional<store::Store> db;
    if (dist.is_root()) db.emplace(o.run.resolved_store());

    // The plan, over the base, grouped by tensor (plan_matrices lists a tensor's units together).
    std::vector<TensorJob> jobs;
    for (auto& u : plan_matrices(base, o.run.selection, o.heads)) {
        if (jobs.empty() || jobs.back().tensor != u.tensor) jobs.push_back({u.tensor, {}, {}, {}});
        jobs.back().units.push_back(u);
    }

    // Every model must match the base: refuse on the first mismatch, or skip and record it.
    auto mismatch = [&](const formats::Checkpoint& ck, const std::string& source, const std::string& tensor,
                        const std::string& block, const std::string& what) {
        if (!o.allow_partial) throw_input_error(source, tensor, what + " (use --allow-partial to skip it)");
        result.skipped.push_back({ck.name, tensor, block, error_context(source, tensor, what)});
    };
    for (auto& job : jobs) job.in_model.assign(n_models, nullptr), job.heads_ok.assign(n_models, 0);
    for (std::size_t m = 0; m < n_models; ++m) {
        const auto& ck = models[m];
        bool heads_ok = true;
        if (o.heads && base.schema.heads) {
            const auto& bg = *base.schema.heads;
            if (!ck.schema.heads) {
                mismatch(ck, ck.path, "", "heads",
                         fmt::format("head geometry unknown (the base has {})", geometry_string(bg)));
                heads_ok = false;
            } else {
                const auto& g = *ck.schema.heads;
                if (g.n_heads != bg.n_heads || g.n_kv_heads != bg.n_kv_heads || g.head_dim != bg.head_dim) {
                    mismatch(ck, ck.path, "", "heads",
                             fmt::format("head geometry differs from the base (expected {}, found {})",
                                         geometry_string(bg), geometry_string(g)));
                    heads_ok = false;
                } else if (ck.schema.qkv_layout != base.schema.qkv_layout ||
                           ck.schema.conv1d_transposed != base.schema.conv1d_transposed) {
                    mismatch(ck, ck.path, "", "heads",
                             fmt::format("attention layout differs from the base (expected {}, found {})",
                                         base.schema.architecture, ck.schema.architecture));
                    heads_ok = false;
                }
            }
        }
        for (auto& job : jobs) {
            const auto& name = job.tensor->name;
            const TensorInfo* t = formats::counterpart(ck, base, *job.tensor);
            if (!t) {
                mismatch(ck, ck.path, name, "", "missing from this model (present in the base)");
            } else if (t->shape != job.tensor->shape) {
                mismatch(ck, t->path(), name, "",
                         fmt::format("shape differs from the base (expected {}, found {})",
                                     shape_string(job.tensor->shape), shape_string(t->shape)));
            } else if (!dtype_is_float(t->dtype) || ck.unsupported_types.count(t->name)) {
                mismatch(ck, t->path(), name, "",
                         fmt::format("dtype {} cannot be compared (the base has {})", dtype_name(t->dtype),
                                     dtype_name(job.tensor->dtype)));
            } else {
                job.in_model[m] = t;
                job.heads_ok[m] = heads_ok;
            }
        }
        for (const auto& t : ck.tensors) {
            if (t.shape.size() < 2 || !dtype_is_float(t.dtype) || ck.unsupported_types.count(t.name))
                continue;
            if (!o.run.selection.selects(t.name, model::classify_tensor(t.name)) ||
                formats::counterpart(base, ck, t))
                continue;
            mismatch(ck, t.path(), t.name, "", "not in the base");
        }
    }

    const bool f64 = o.precision == Precision::f64;
    const std::uint64_t budget = o.run.resolved_max_memory();
    const std::string config = o.config_key();
    // Results are indexed flat: slot(job, model, unit).
    std::vector<std::size_t> first_slot(jobs.size() + 1, 0);
    for (std::size_t j = 0; j < jobs.size(); ++j)
        first_slot[j + 1] = first_slot[j] + n_models * jobs[j].units.size();
    auto slot = [&](std::size_t j, std::size_t m, std::size_t u) {
        return first_slot[j] + m * jobs[j].units.size() + u;
    };
    // Results are keyed by the content of both tensors they are computed from (rank 0 hashes them).
    store::ContentIds base_content;
    std::vector<store::ContentIds> content(n_models);
    if (db) {
        const int threads = o.run.resolved_threads();
        std::vector<const TensorInfo*> tensors;
        for (const auto& job : jobs) tensors.push_back(job.tensor);
        base_content = store::identify_model(*db, base, tensors, threads, o.run.progress);
        for (std::size_t m = 0; m < n_models; ++m) {
            tensors.clear();
            for (const auto& job : jobs)
                if (job.in_model[m]) tensors.push_back(job.in_model[m]);
            content[m] = store::identify_model(*db, models[m], tensors, threads, o.run.progress);
            db->record_pair(models[m].name, base.name);
        }
    }
    // A factored delta is the adapter's exact update, not the rounded merged bytes' difference: it is
    // stored under its own configuration.
    auto key_of = [&](std::size_t j, std::size_t m, std::size_t u) {
        const bool factored = factored_delta(o, *jobs[j].tensor, *jobs[j].in_model[m]);
        return store::ResultKey{content[m].at(jobs[j].in_model[m]), base_content.at(jobs[j].tensor),
                                jobs[j].units[u].store_block(), factored ? config + ";factored" : config};
    };
    // compared[slot]: 0 = not compared (skipped), 1 = to compute, 2 = reused from the store.
    std::string compared(first_slot.back(), 0);
    std::vector<std::optional<FieldValues>> values(first_slot.back());
    for (std::size_t j = 0; j < jobs.size(); ++j)
        for (std::size_t m = 0; m < n_models; ++m) {
            if (!jobs[j].in_model[m]) continue;
            for (std::size_t u = 0; u < jobs[j].units.size(); ++u) {
                if (jobs[j].units[u].head && !jobs[j].heads_ok[m]) continue;
                compared[slot(j, m, u)] = 1;
                if (!db) continue;
                if (auto hit = db->get(key_of(j, m, u), stored_fields())) {
                    values[slot(j, m, u)] = std::move(*hit);
                    compared[slot(j, m, u)] = 2;
                    ++result.reused;
                }
            }
        }
    // Every rank learns what is left and takes its share, longest first.
    broadcast_bytes(compared);
    std::vector<TaskCost> costs;
    std::vector<char> needed(jobs.size(), 0);
    for (std::size_t j = 0; j < jobs.size(); ++j) {
        double flops = 0;
        for (const auto& u : jobs[j].units) flops += u.flops();
        costs.push_back(
            {flops * static_cast<double>(n_models + 1), job_bytes(jobs[j], f64, o.route, budget)});
        for (std::size_t i = first_slot[j]; i < first_slot[j + 1]; ++i) needed[j] |= compared[i] == 1;
    }
    const auto mine = assign_tasks(costs, needed);
    std::vector<TaskCost> my_costs;
    for (auto j : mine) my_costs.push_back(costs[j]);

    const Context ctx{o, base, models};
    linalg::set_blas_threads(1);  // deterministic sums whatever the thread or rank count (see analyze.cpp)
    std::mutex count_mu;
    Progress progress("compare", mine.size(), o.run.progress && dist.is_root(), o.run.progress_sink);
    run_tasks(my_costs, o.run.resolved_threads(), budget, [&](std::size_t t) {
        thread_local auto backend = linalg::make_backend(o.run.device);
        const std::size_t j = mine[t];
        const auto& job = jobs[j];
        std::vector<BaseCache> cache(job.units.size());
        // NaN/Inf entries are counted before anything is factorised or sent to a device: each tensor
        // once, the blocks only of a tensor that has some. A unit with any gets NaN fields.
        std::optional<bool> base_clean;
        for (std::size_t m = 0; m < n_models; ++m) {
            bool any = false;
            std::optional<bool> model_clean;
            for (std::size_t u = 0; u < job.units.size(); ++u) {
                if (compared[slot(j, m, u)] != 1) continue;
                any = true;
                const auto& unit = job.units[u];
                const auto& mt = *job.in_model[m];
                if (!base_clean) base_clean = count_nonfinite(*job.tensor, f64) == 0;
                // A factored delta's merged tensor is never formed: its base and factors are checked.
                if (!model_clean)
                    model_clean = factored_delta(o, *job.tensor, mt)
                                      ? *base_clean && count_nonfinite(mt.low_rank->a, f64) == 0 &&
                                            count_nonfinite(mt.low_rank->b, f64) == 0
                                      : count_nonfinite(mt, f64) == 0;
                const auto bad = *base_clean && *model_clean
                                     ? NonfinitePair{}
                                     : count_nonfinite_pair(*job.tensor, mt, unit.block, f64);
                auto fv = bad.either > 0 ? nonfinite_compare_values()
                          : f64          ? compare_unit<double>(ctx, unit, mt, cache[u], *backend)
                                         : compare_unit<float>(ctx, unit, mt, cache[u], *backend);
                set_nonfinite_counts(bad, fv);
                if (db) db->put(key_of(j, m, u), fv, compare_vector_fields());
                values[slot(j, m, u)] = std::move(fv);
                std::lock_guard lock(count_mu);
                ++result.computed;
            }
            // This model's pages are no longer needed by this thread: keep resident memory small.
            if (any) job.in_model[m]->file->dont_need(job.in_model[m]->offset, job.in_model[m]->nbytes);
        }
        job.tensor->file->dont_need(job.tensor->offset, job.tensor->nbytes);
        progress.advance();
    });
    progress.finish();

    // Rank 0 gathers the other ranks' results into the store.
    std::string payload;
    if (!dist.is_root())
        for (auto j : mine)
            for (std::size_t i = first_slot[j]; i < first_slot[j + 1]; ++i)
                if (compared[i] == 1) payload += serialize_field_values(i, *values[i]);
    for (const auto& bytes : gather_bytes(payload)) {
        for (auto& [i, v] : parse_field_values(bytes)) {
            if (i >= values.size() || compared[i] != 1)
                throw std::runtime_error(
                    fmt::format("compare: a rank sent result {} that nobody computed", i));
            const auto j = static_cast<std::size_t>(
                std::upper_bound(first_slot.begin(), first_slot.end(), i) - first_slot.begin() - 1);
            const std::size_t m = (i - first_slot[j]) / jobs[j].units.size(),
                              u = (i - first_slot[j]) % jobs[j].units.size();
            db->put(key_of(j, m, u), v, compare_vector_fields());
            values[i] = std::move(v);
            ++result.computed;
        }
    }
    if (!dist.is_root()) return result;
    for (std::size_t i = 0; i < values.size(); ++i)
        if (compared[i] == 1 && values[i]->scalars.at(kWholeRouteField) != 0) ++result.whole_route;

    std::vector<std::size_t> row_model;  // the model index of each row
    NonfiniteReport nonfinite_report;
    for (std::size_t m = 0; m < n_models; ++m)
        for (std::size_t j = 0; j < jobs.size(); ++j)
            for (std::size_t u = 0; u < jobs[j].units.size(); ++u) {
                auto& v = values[slot(j, m, u)];
                if (!v) continue;
                v->scalars.erase(kWholeRouteField);
                row_model.push_back(m);
                const auto& unit = jobs[j].units[u];
                auto take = [&](const char* field) {
                    const auto n = static_cast<std::int64_t>(v->scalars[field]);
                    v->scalars.erase(field);
                    return n;
                };
                const auto nonfinite = take(kNonfiniteCountField);
                nonfinite_report.add(*jobs[j].tensor, unit.block, unit.head.has_value(),
                                     take(kNonfiniteBaseField));
                nonfinite_report.add(*jobs[j].in_model[m], unit.block, unit.head.has_value(),
                                     take(kNonfiniteModelField));
                result.rows.push_back({models[m].name, base.name, unit.tensor->name, unit.layer,
                                       std::string(model::role_name(unit.role)), unit.head,
                                       unit.block.logical_rows(), unit.block.logical_cols(), nonfinite,
                                       std::move(v->scalars)});
            }
    result.warnings = nonfinite_report.warnings();

    // Per head: the Q, K, V, O block norms (GQA: K/V from the query head's kv group).
    if (o.heads && base.schema.heads) {
        const auto& g = *base.schema.heads;
        auto head_stats = [&](std::size_t model_index) {
            std::map<std::pair<int, int>, HeadStats> stats;
            std::map<std::pair<int, int>, std::pair<double, int>> agree, ks;  // sums and counts
            for (std::size_t r = 0; r < result.rows.size(); ++r) {
                const auto& row = result.rows[r];
                const int p = projection_index(row.role);
                if (row_model[r] != model_index || !row.head || !row.layer || p < 0) continue;
                std::vector<int> query_heads;
                if (p == 1 || p == 2) {
                    for (int h = 0; h < g.n_heads; ++h)
                        if (g.kv_head_of(h) == *row.head) query_heads.push_back(h);
                } else {
                    query_heads.push_back(*row.head);
                }
                const auto& v = row.values;
                for (int h : query_heads) {
                    const std::pair key{*row.layer, h};
                    auto& s = stats[key];
                    s.layer = *row.layer, s.head = h;
                    s.block_norm[p] = v.at("delta_frob_norm");
                    auto& a = agree[key];
                    a.first += 0.5 * (v.at("avg_l_agreement") + v.at("avg_r_agreement")), ++a.second;
                    auto& k = ks[key];
                    k.first += v.at("pl_ks"), ++k.second;
                }
            }
            std::vector<HeadStats> out;
            for (auto& [key, s] : stats) {
                s.agreement = agree[key].first / agree[key].second;
                s.pl_ks = ks[key].first / ks[key].second;
                out.push_back(s);
            }
            return out;
        };
        std::vector<HeadStats> ref_stats;
        if (ref_index >= 0) ref_stats = head_stats(static_cast<std::size_t>(ref_index));
        for (std::size_t m = 0; m < n_models; ++m) {
            if (static_cast<int>(m) == ref_index) continue;
            const auto dom = head_stats(m);
            const auto ranked = rank_heads(dom, ref_index >= 0 ? &ref_stats : nullptr, o.ranking);
            std::map<std::pair<int, int>, const HeadStats*> ref_of;
            for (const auto& r : ref_stats) ref_of[{r.layer, r.head}] = &r;
            for (std::size_t i = 0; i < dom.size(); ++i) {
                HeadRow row;
                row.model = models[m].name;
                row.reference = ref_index >= 0 ? models[static_cast<std::size_t>(ref_index)].name : "";
                row.layer = dom[i].layer, row.head = dom[i].head;
                row.kv_head = g.kv_head_of(dom[i].head), row.kv_group_size = g.group_size();
                row.domain = dom[i];
                if (auto it = ref_of.find({dom[i].layer, dom[i].head}); it != ref_of.end())
                    row.ref = *it->second;
                row.ranked = ranked[i];
                result.heads.push_back(row);
            }
        }
    }
    return result;
}

void write_compare_csvs(const CompareResult& r, const std::string& out_dir) {
    std::string csv = "model,base,tensor,layer,role,head,rows,cols,nonfinite_count";
    for (const auto& f : compare_fields()) csv += "," + f;
    csv += "\n";
    for (const auto& row : r.rows) {
        csv +=
            fmt::format("{},{},{},{},{},{},{},{},{}", csv_field(row.model), csv_field(row.base),
                        csv_field(row.tensor), row.layer ? std::to_string(*row.layer) : "", row.role,
                        row.head ? std::to_string(*row.head) : "", row.rows, row.cols, row.nonfinite_count);
        for (const auto& f : compare_fields()) {
            auto it = row.values.find(f);
            csv += "," + format_value(it == row.values.end() ? kNaN : it->second);
        }
        csv += "\n";
    }
    std::string heads =
        "model,reference,layer,head,kv_head,kv_group_size,update_norm,q_update_norm,k_update_norm,v_update_"
        "norm,"
        "o_update_norm,ref_update_norm,ref_q_update_norm,ref_k_update_norm,ref_v_update_norm,ref_o_update_"
        "norm,"
        "importance,agreement,pl_ks,scale_scope,order,seed,rank\n";
    for (const auto& h : r.heads) {
        heads += fmt::format("{},{},{},{},{},{},{}", csv_field(h.model), csv_field(h.reference), h.layer,
                             h.head, h.kv_head, h.kv_group_size, format_value(h.ranked.update_norm));
        for (double v : h.domain.block_norm) heads += "," + format_value(v);
        heads += "," + format_value(h.ranked.ref_update_norm);
        for (double v : h.ref.block_norm) heads += "," + format_value(v);
        heads += fmt::format(",{},{},{},{},{},{},{}\n", format_value(h.ranked.importance),
                             format_value(h.domain.agreement), format_value(h.domain.pl_ks),
                             scale_scope_name(r.ranking.scope), head_order_name(r.ranking.order),
                             r.ranking.seed, h.ranked.rank);
    }
    std::map<std::string, std::string> files{{"compare.csv", csv}, {"heads.csv", heads}};
    if (r.allow_partial) {
        std::string skipped = "model,tensor,block,reason\n";
        for (const auto& s : r.skipped)
            skipped += fmt::format("{},{},{},{}\n", csv_field(s.model), csv_field(s.tensor), s.block,
                                   csv_field(s.reason));
        files["skipped.csv"] = skipped;
    }
    write_result_directory(out_dir, files);
}

}  // namespace diffract::analysis
