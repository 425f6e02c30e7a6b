// The comparison of a model's matrix (or head block) with the base's (CROSS_MODEL level of
// metrics.md), as pure computations on opened tensors: the agreement and spectral-invariance fields of
// two factorizations, the delta fields, and one planned unit on either route. By default both matrices
// are streamed through their Gram products (linalg/gram_pair.hpp), so no matrix is held whole;
// --svd-route gesdd (and the fallback for ill-conditioned vectors) factorises whole matrices with
// backend.svd. The compare job (run/compare.hpp) plans the units, keys them in the store and ranks heads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::analysis {

inline constexpr int kDefaultTopK = 10;

// The scalar fields of compare.csv, in column order (after model, base, tensor, layer, role, head,
// rows, cols):
//   delta_frob_norm, rel_delta_frob_norm, delta_l2_norm, delta_stable_rank, delta_effective_rank,
//   rel_sval_change, esd_ks,
//   avg_l_agreement, avg_max_l_agreement, avg_r_agreement, avg_max_r_agreement,
//   topk_avg_l_agreement, topk_avg_max_l_agreement, topk_avg_r_agreement, topk_avg_max_r_agreement,
//   chance_l_agreement, chance_max_l_agreement, chance_topk_max_l_agreement,
//   chance_r_agreement, chance_max_r_agreement, chance_topk_max_r_agreement,
//   top_k, pl_ks (the model's matrix: power-law fit of its ESD).
const std::vector<std::string>& compare_fields();
// compare.csv's computed columns with their definitions (docs/compare.md), for `diffract metrics
// --table compare`: compare_fields() in its order (a test ties the two), then the vector fields.
struct CompareFieldInfo {
    std::string_view name, formula;
};
const std::vector<CompareFieldInfo>& compare_field_catalog();
// The per-component vectors kept in the store (not in the CSV): l_agreement, r_agreement,
// max_l_agreement, max_r_agreement, and delta_svals (the singular values of W_model - W_base, ascending).
const std::vector<std::string>& compare_vector_fields();

// What the head and expert rankings read of one compared unit (head_ranking.hpp, expert_ranking.hpp).
struct UnitChange {
    double delta_frob_norm = 0, rel_delta_frob_norm = 0, avg_l_agreement = 0, avg_r_agreement = 0, pl_ks = 0;
};
// The unit's change from its compare_fields() values (std::out_of_range when one is missing: a defect).
UnitChange unit_change(const std::map<std::string, double>& values);

// The agreement and spectral-invariance fields of two factorizations of same-shape matrices
// (1 = the base): overlap O = |U1ᵀ U2| (and V), its diagonal and row-wise max, their means over all
// components and over the top-k (the last k, values ascending), chance levels, rel_sval_change,
// esd_ks and the model's pl_ks.
FieldValues compare_factorizations(const linalg::Svd& base, const linalg::Svd& model, std::int64_t rows,
                                   std::int64_t cols, int top_k);

// The delta fields from the delta matrix D = W − W_base: delta_frob_norm (from the entries),
// rel_delta_frob_norm (÷ base_frob_norm), delta_l2_norm, delta_stable_rank, delta_effective_rank (from
// backend.singular_values(D, route)). Added to `out`.
template <typename T>
void add_delta_fields(const Matrix<T>& delta, double base_frob_norm, linalg::Backend& backend,
                      linalg::SvdRoute route, FieldValues& out);

// Both of the above for two matrices in memory (tests; small matrices).
template <typename T>
FieldValues compare_matrices(const Matrix<T>& base, const Matrix<T>& model, int top_k,
                             linalg::Backend& backend, linalg::SvdRoute route = linalg::SvdRoute::auto_route);

// The version that leads every compare store key (CompareSettings::config_key), as kKernelConfigVersion.
inline constexpr std::string_view kCompareConfigVersion = "compare-v2";
// Whether a stored result's configuration is one this version computes (analyze's or compare's, a custom
// field's included): a store keeps an older version's results, which nothing reuses.
bool current_config(std::string_view config);
// Whether a stored configuration (analyze's or compare's) is the f64 tier's.
bool f64_config(std::string_view config);

// What a comparison computes, besides its inputs: part of every stored result's key (config_key).
struct CompareSettings {
    int top_k = kDefaultTopK;
    Precision precision = Precision::f64;
    linalg::SvdRoute route = linalg::SvdRoute::auto_route;  // singular values of the delta
    // Only the delta fields (delta_*, rel_delta_frob_norm; the others NaN): one values-only SVD of
    // each delta instead of four factorisations, and for a LoRA adapter on this base the adapter's
    // factors alone, in O((m + n)·r²) per matrix or head block (docs/compare.md).
    bool delta_only = false;
    // Values per streamed slab on the Gram route (0: about 2M, 16 MB in f64). Tests make it small to
    // cross many slab boundaries; results do not depend on it beyond rounding.
    std::int64_t slab_values = 0;
    std::string config_key() const;
};

// The base's factorization of one unit, computed with its first model and shared by the others.
struct GramFactors {
    std::vector<double> lambda, vectors;  // σ², the short-side vectors (column-major k × k)
    double sq_norm = 0;
    // λ_min ≥ kGramVectorGuard·λ_max (or the route is forced), or the components under it refined.
    bool trusted = false;
    // The first `refined` components (those under the guard) recomputed from the matrix read whole
    // (Backend::small_components): their λ and vectors replaced, and their long-side vectors
    // u = Y v / σ kept (column-major length × refined), which the long-side overlaps use directly.
    std::size_t refined = 0;
    std::vector<double> long_vectors;
    bool f32 = false;  // from f32 products (--precision f32, linalg::f32_gram_kept)
};
struct BaseFactorization {
    std::optional<GramFactors> gram;  // the Gram route
    std::optional<linalg::Svd> svd;   // the whole-matrix route
};

// The fields of `unit` (a block of the base's tensor) against the same block of `model_tensor`, on the
// route `settings` gives; `base` caches the base's factorization across models. Its bookkeeping holds the
// route (whole_route) and the precision that served it.
template <typename T>
FieldValues compare_unit(const CompareSettings& settings, const MatrixUnit& unit,
                         const TensorInfo& model_tensor, BaseFactorization& base, linalg::Backend& backend);

// --delta-only on a model tensor that is this base tensor plus a low-rank update (a LoRA adapter on
// this base): the delta is the update itself, computed from its factors (stored under its own key).
bool factored_delta(const CompareSettings& settings, const TensorInfo& base, const TensorInfo& model);

// One tensor of the base with its units, and its counterpart in each model: one task of compare.
struct TensorJob {
    const TensorInfo* tensor = nullptr;
    std::vector<MatrixUnit> units;
    std::vector<const TensorInfo*> in_model;  // per model; null: skipped
    std::vector<char> heads_ok;               // per model: head blocks compared
};

// The working memory a tensor job reserves: its largest unit's (units run one after another). On the
// Gram routes that is the streamed size, with refining a few small components from the matrix read
// whole when that fits `budget` at all (a 100k-row embedding is reserved without: its spectrum is well
// within the guard in the models we measured). The whole-matrix fallback of a nearly rank-deficient
// unit (docs/compare.md) is not reserved, so that two 7B-sized units fit a 4 GB budget side by side.
// --delta-only and gesdd read both matrices whole.
std::uint64_t tensor_job_bytes(const TensorJob& job, const CompareSettings& settings, std::uint64_t budget);

// Computes `job`'s units against each model where `wanted(model, unit)`, handing every unit's values to
// `done(model, unit, values)`, model by model. NaN/Inf entries are counted before anything is
// factorised or sent to a device: each tensor once, the blocks only of a tensor that has some; a unit
// with any gets NaN fields and its counts. Each model's pages are released once its units are done.
using WantedUnit = std::function<bool(std::size_t model, std::size_t unit)>;
using DoneUnit = std::function<void(std::size_t model, std::size_t unit, FieldValues values)>;
void compare_tensor_job(const CompareSettings& settings, const TensorJob& job, const WantedUnit& wanted,
                        const DoneUnit& done, linalg::Backend& backend);

}  // namespace diffract::analysis
