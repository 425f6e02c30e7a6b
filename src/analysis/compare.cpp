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
#include "diffract/core/error.hpp"
#include "diffract/core/parallel.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/formats/memory_checkpoint.hpp"
#include "diffract/store/store.hpp"

extern "C" void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                       const double* beta, double* c, const int* ldc);

namespace diffract::analysis {
namespace {

constexpr double kEps = 1e-16;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int checked_int(std::int64_t v) {
    if (v > std::numeric_limits<int>::max())
        throw std::runtime_error(fmt::format("dimension {} exceeds BLAS's 32-bit index", v));
    return static_cast<int>(v);
}

// |Aᵀ B| for row-major A, B (m × k): k × k row-major. The column-major views of A and B are Aᵀ and
// Bᵀ (k × m); C_cm = Bᵀ·(Aᵀ)ᵀ = BᵀA, read row-major that is AᵀB.
Matrix<double> abs_overlap(const Matrix<double>& a, const Matrix<double>& b) {
    const int k = checked_int(a.cols), m = checked_int(a.rows);
    Matrix<double> o(a.cols, a.cols);
    if (k == 0) return o;
    const double one = 1.0, zero = 0.0;
    dgemm_("N", "T", &k, &k, &m, &one, b.data.data(), &k, a.data.data(), &k, &zero, o.data.data(), &k);
    for (auto& v : o.data) v = std::abs(v);
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

// The agreement fields of one side (l: U, d = rows; r: V, d = cols).
void add_agreement(const Matrix<double>& base_vecs, const Matrix<double>& model_vecs, std::int64_t d,
                   int top_k, const std::string& side, FieldValues& out) {
    const auto k = static_cast<std::size_t>(base_vecs.cols);
    std::vector<double> diag(k), best(k);
    if (k > 0) {
        const auto o = abs_overlap(base_vecs, model_vecs);
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

// The logical sub-matrix of `whole` (the logical matrix of block `wb`) covering block `b` of the same
// tensor (stored coordinates).
template <typename T>
Matrix<T> slice(const Matrix<T>& whole, const MatrixBlock& wb, const MatrixBlock& b) {
    const std::int64_t r0 = b.row0 - wb.row0, c0 = b.col0 - wb.col0;
    const std::int64_t lr0 = b.transposed ? c0 : r0, lc0 = b.transposed ? r0 : c0;
    Matrix<T> out(b.logical_rows(), b.logical_cols());
    for (std::int64_t i = 0; i < out.rows; ++i) std::copy_n(&whole(lr0 + i, lc0), out.cols, &out(i, 0));
    return out;
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
                                               "max_r_agreement"};
    return f;
}

FieldValues compare_factorizations(const linalg::Svd& base, const linalg::Svd& model, std::int64_t rows,
                                   std::int64_t cols, int top_k) {
    if (base.s.size() != model.s.size() || base.u.rows != model.u.rows || base.v.rows != model.v.rows)
        throw std::invalid_argument("compare_factorizations: factorizations of different shapes");
    FieldValues out;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < base.s.size(); ++i) {
        const double d = model.s[i] - base.s[i];
        num += d * d, den += base.s[i] * base.s[i];
    }
    out.scalars["rel_sval_change"] = den > 0 ? std::sqrt(num) / std::sqrt(den) : (num > 0 ? kNaN : 0.0);
    const double n_greater = static_cast<double>(std::max(rows, cols));
    std::vector<double> esd_base(base.s.size()), esd_model(model.s.size());
    for (std::size_t i = 0; i < base.s.size(); ++i) esd_base[i] = base.s[i] * base.s[i] / n_greater;
    for (std::size_t i = 0; i < model.s.size(); ++i) esd_model[i] = model.s[i] * model.s[i] / n_greater;
    out.scalars["pl_ks"] = fit_power_law(esd_model).ks;
    out.scalars["esd_ks"] = two_sample_ks(std::move(esd_base), std::move(esd_model));
    const int t = std::max(1, top_k);
    add_agreement(base.u, model.u, rows, t, "l", out);
    add_agreement(base.v, model.v, cols, t, "r", out);
    out.scalars["top_k"] =
        static_cast<double>(std::min<std::size_t>(static_cast<std::size_t>(t), base.s.size()));
    return out;
}

template <typename T>
void add_delta_fields(const Matrix<T>& delta, double base_frob_norm, linalg::Backend& backend,
                      linalg::SvdRoute route, FieldValues& out) {
    double s2 = 0;
    for (T v : delta.data) s2 += static_cast<double>(v) * static_cast<double>(v);
    const double frob = std::sqrt(s2);
    const auto s = backend.singular_values(delta, route);
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
    return fmt::format("compare-v1;precision={};top_k={};delta_route={}",
                       precision == Precision::f32 ? "f32" : "f64", top_k, route_name);
}

namespace {

// One tensor of the base with its units, and where it is in each model.
struct TensorJob {
    const TensorInfo* tensor = nullptr;
    std::vector<MatrixUnit> units;
    std::vector<const TensorInfo*> in_model;  // per model; null: skipped
    std::vector<char> heads_ok;               // per model: head blocks compared
};

struct Context {
    const CompareOptions& o;
    const formats::Checkpoint& base;
    const std::vector<formats::Checkpoint>& models;
    std::int64_t base_id;
    const std::vector<std::int64_t>& ids;
    store::Store& db;
    std::string config;
};

template <typename T>
void run_job(const Context& c, const TensorJob& job, const std::vector<std::vector<char>>& need,
             std::vector<std::vector<std::optional<std::map<std::string, double>>>>& out,
             linalg::Backend& backend, std::size_t& computed) {
    const MatrixBlock wb = model::whole_matrix(c.base.schema, *job.tensor);
    const Matrix<T> bw = read_matrix<T>(*job.tensor, wb);
    const std::size_t n_units = job.units.size();
    std::vector<std::optional<linalg::Svd>> base_svd(n_units);
    for (std::size_t m = 0; m < c.models.size(); ++m) {
        if (std::none_of(need[m].begin(), need[m].end(), [](char x) { return x != 0; })) continue;
        const TensorInfo& mt = *job.in_model[m];
        Matrix<T> mw = read_matrix<T>(mt, model::whole_matrix(c.models[m].schema, mt));
        std::vector<FieldValues> fv(n_units);
        for (std::size_t u = 0; u < n_units; ++u) {
            if (!need[m][u]) continue;
            const auto& unit = job.units[u];
            Matrix<T> bs, ms;
            if (unit.head) bs = slice(bw, wb, unit.block), ms = slice(mw, wb, unit.block);
            const Matrix<T>& bm = unit.head ? bs : bw;
            const Matrix<T>& mm = unit.head ? ms : mw;
            if (!base_svd[u]) base_svd[u] = backend.svd(bm);
            // An identical matrix (a model compared with itself, an untouched tensor) shares the base's
            // factorization: agreement exactly 1, no SVD spent.
            linalg::Svd own;
            const bool same = bm.data == mm.data;
            if (!same) own = backend.svd(mm);
            fv[u] =
                compare_factorizations(*base_svd[u], same ? *base_svd[u] : own, bm.rows, bm.cols, c.o.top_k);
        }
        for (std::size_t i = 0; i < mw.data.size(); ++i) mw.data[i] -= bw.data[i];  // mw is now the delta
        for (std::size_t u = 0; u < n_units; ++u) {
            if (!need[m][u]) continue;
            const auto& unit = job.units[u];
            Matrix<T> ds;
            if (unit.head) ds = slice(mw, wb, unit.block);
            double f2 = 0;
            for (double v : base_svd[u]->s) f2 += v * v;
            add_delta_fields(unit.head ? ds : mw, std::sqrt(f2), backend, c.o.route, fv[u]);
            c.db.put({c.ids[m], c.base_id, job.tensor->name, unit.block_key(), c.config}, fv[u],
                     compare_vector_fields());
            out[m][u] = std::move(fv[u].scalars);
            ++computed;
        }
        mt.file->dont_need(mt.offset, mt.nbytes);
    }
    job.tensor->file->dont_need(job.tensor->offset, job.tensor->nbytes);
}

// Peak working memory of a job: the two whole matrices, the base's factorizations (whole and heads),
// and the larger of one model SVD in flight (LAPACK's copies and workspace plus the f64 result) and
// the delta's Gram route (an f64 copy).
std::uint64_t job_bytes(const TensorJob& job, bool f64) {
    std::uint64_t m = 0, n = 0;
    for (const auto& u : job.units)
        if (!u.head)
            m = static_cast<std::uint64_t>(u.block.logical_rows()),
            n = static_cast<std::uint64_t>(u.block.logical_cols());
    if (m == 0) {  // heads only: the whole tensor is still read
        m = static_cast<std::uint64_t>(stored_rows(*job.tensor)),
        n = static_cast<std::uint64_t>(stored_cols(*job.tensor));
    }
    const std::uint64_t s = f64 ? 8 : 4, k = std::min(m, n);
    const std::uint64_t held = 2 * s * m * n + 16 * (m + n) * k;
    const std::uint64_t svd = s * (m * n + (m + n) * k + 4 * k * k) + 8 * ((m + n) * k + k * k);
    const std::uint64_t gram = 8 * (m * n + k * k);
    return held + std::max(svd, gram);
}

}  // namespace

CompareResult compare(const CompareOptions& o) {
    if (o.top_k < 1)
        throw InputError(fmt::format("--top-k: expected a positive number of components, found {}", o.top_k));
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

    store::Store db(o.run.store_path.empty() ? store::kDefaultStorePath : o.run.store_path);
    const std::int64_t base_id = db.model_id(store::fingerprint(base), base.name, base.path);
    std::vector<std::int64_t> ids;
    for (const auto& ck : models) ids.push_back(db.model_id(store::fingerprint(ck), ck.name, ck.path));

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
            const TensorInfo* t = ck.find(name);
            if (!t) {
                mismatch(ck, ck.path, name, "", "missing from this model (present in the base)");
            } else if (t->shape != job.tensor->shape) {
                mismatch(ck, t->path(), name, "",
                         fmt::format("shape differs from the base (expected {}, found {})",
                                     shape_string(job.tensor->shape), shape_string(t->shape)));
            } else if (!dtype_is_float(t->dtype) || ck.unsupported_types.count(name)) {
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
            if (!o.run.selection.selects(t.name, model::classify_tensor(t.name)) || base.find(t.name))
                continue;
            mismatch(ck, t.path(), t.name, "", "not in the base");
        }
    }

    const bool f64 = o.precision == Precision::f64;
    std::vector<TaskCost> costs;
    for (const auto& job : jobs) {
        double flops = 0;
        for (const auto& u : job.units) flops += u.flops();
        costs.push_back({flops * static_cast<double>(n_models + 1), job_bytes(job, f64)});
    }
    // results[job][model][unit]: the scalar fields, or empty when not compared.
    std::vector<std::vector<std::vector<std::optional<std::map<std::string, double>>>>> results(jobs.size());
    const Context ctx{o, base, models, base_id, ids, db, o.config_key()};
    const int threads = o.run.resolved_threads();
    linalg::set_blas_threads(1);  // deterministic sums whatever the thread count (see analyze.cpp)
    std::mutex count_mu;
    Progress progress("compare", jobs.size(), o.run.progress);
    run_tasks(costs, threads, o.run.resolved_max_memory(), [&](std::size_t i) {
        thread_local auto backend = linalg::make_backend(o.run.device);
        const auto& job = jobs[i];
        auto& res = results[i];
        res.assign(n_models, std::vector<std::optional<std::map<std::string, double>>>(job.units.size()));
        std::vector<std::vector<char>> need(n_models, std::vector<char>(job.units.size(), 0));
        bool any = false;
        std::size_t reused = 0, computed = 0;
        for (std::size_t m = 0; m < n_models; ++m) {
            if (!job.in_model[m]) continue;
            for (std::size_t u = 0; u < job.units.size(); ++u) {
                const auto& unit = job.units[u];
                if (unit.head && !job.heads_ok[m]) continue;
                const store::ResultKey key{ids[m], base_id, job.tensor->name, unit.block_key(), ctx.config};
                if (auto hit = db.get(key, compare_fields())) {
                    res[m][u] = std::move(hit->scalars);
                    ++reused;
                } else {
                    need[m][u] = 1;
                    any = true;
                }
            }
        }
        if (any) {
            if (f64)
                run_job<double>(ctx, job, need, res, *backend, computed);
            else
                run_job<float>(ctx, job, need, res, *backend, computed);
        }
        {
            std::lock_guard lock(count_mu);
            result.reused += reused;
            result.computed += computed;
        }
        progress.advance();
    });
    progress.finish();

    std::vector<std::size_t> row_model;  // the model index of each row
    for (std::size_t m = 0; m < n_models; ++m)
        for (std::size_t j = 0; j < jobs.size(); ++j)
            for (std::size_t u = 0; u < jobs[j].units.size(); ++u) {
                if (!results[j][m][u]) continue;
                row_model.push_back(m);
                const auto& unit = jobs[j].units[u];
                result.rows.push_back({models[m].name, base.name, unit.tensor->name, unit.layer,
                                       std::string(model::role_name(unit.role)), unit.head,
                                       unit.block.logical_rows(), unit.block.logical_cols(),
                                       std::move(*results[j][m][u])});
            }

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
    std::string csv = "model,base,tensor,layer,role,head,rows,cols";
    for (const auto& f : compare_fields()) csv += "," + f;
    csv += "\n";
    for (const auto& row : r.rows) {
        csv += fmt::format("{},{},{},{},{},{},{},{}", csv_field(row.model), csv_field(row.base),
                           csv_field(row.tensor), row.layer ? std::to_string(*row.layer) : "", row.role,
                           row.head ? std::to_string(*row.head) : "", row.rows, row.cols);
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
    std::filesystem::create_directories(out_dir);
    const std::filesystem::path dir(out_dir);
    write_file_atomically((dir / "compare.csv").string(), csv);
    write_file_atomically((dir / "heads.csv").string(), heads);
    if (r.allow_partial) {
        std::string skipped = "model,tensor,block,reason\n";
        for (const auto& s : r.skipped)
            skipped += fmt::format("{},{},{},{}\n", csv_field(s.model), csv_field(s.tensor), s.block,
                                   csv_field(s.reason));
        write_file_atomically((dir / "skipped.csv").string(), skipped);
    }
}

}  // namespace diffract::analysis
