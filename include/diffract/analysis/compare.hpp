// `compare`: every selected matrix (and head block) of one or more models against a base model
// (CROSS_MODEL level of metrics.md), and the per-head update norms, importance score and ranking.
//
// A job is one tensor of the base (its whole matrix and head blocks) against every model. By default
// both matrices are streamed through their Gram products (linalg/gram_pair.hpp), so no matrix is held
// whole; --svd-route gesdd (and the fallback for ill-conditioned vectors) factorises whole matrices
// with backend.svd. Results persist in the store, keyed by (model, base, tensor, block, compare
// configuration): a re-run reads nothing it has. Under MPI the jobs are split across ranks and rank 0
// gathers the results (docs/compare.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/analyze.hpp"
#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/core/matrix.hpp"
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
// The per-component vectors kept in the store (not in the CSV): l_agreement, r_agreement,
// max_l_agreement, max_r_agreement, and delta_svals (the singular values of W_model - W_base, ascending).
const std::vector<std::string>& compare_vector_fields();

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

struct CompareOptions {
    std::string base;                 // checkpoint spec
    std::vector<std::string> models;  // checkpoint specs (NAME=PATH allowed)
    std::string reference;            // "" : none
    int top_k = kDefaultTopK;
    Precision precision = Precision::f64;
    linalg::SvdRoute route = linalg::SvdRoute::auto_route;  // singular values of the delta
    bool heads = true;
    bool allow_partial = false;
    // Only the delta fields (delta_*, rel_delta_frob_norm; the others NaN): one values-only SVD of
    // each delta instead of four factorisations, and for a LoRA adapter on this base the adapter's
    // factors alone, in O((m + n)·r²) per matrix or head block (docs/compare.md).
    bool delta_only = false;
    // Values per streamed slab on the Gram route (0: about 2M, 16 MB in f64). Tests make it small to
    // cross many slab boundaries; results do not depend on it beyond rounding.
    std::int64_t slab_values = 0;
    HeadRankOptions ranking;
    RunOptions run;
    std::string config_key() const;
};

struct CompareRow {
    std::string model, base, tensor;
    std::optional<int> layer;
    std::string role;
    std::optional<int> head;
    std::int64_t rows = 0, cols = 0;
    // Positions where the model's or the base's block holds NaN/Inf (read at the run's precision);
    // when > 0 the pair was never factorised and every field is NaN.
    std::int64_t nonfinite_count = 0;
    std::map<std::string, double> values;
};

struct HeadRow {
    std::string model, reference;
    int layer = 0, head = 0, kv_head = 0, kv_group_size = 1;
    HeadStats domain, ref;  // ref: NaN norms without a reference
    RankedHead ranked;
};

struct SkippedItem {
    std::string model, tensor, block, reason;  // block: "" (whole tensor) or "heads"
};

struct CompareResult {
    std::vector<CompareRow> rows;
    std::vector<HeadRow> heads;
    std::vector<SkippedItem> skipped;
    HeadRankOptions ranking;
    bool allow_partial = false;
    std::size_t computed = 0, reused = 0;  // (model, matrix) pairs
    std::size_t whole_route = 0;           // of the computed: on the whole-matrix route (gesdd or fallback)
    // One line per tensor (of the base or a model) with non-finite entries (nonfinite_warning).
    std::vector<std::string> warnings;
};

// Throws InputError on the first mismatch between a model and the base (different shape, missing or
// extra tensor, different head geometry) unless allow_partial, which skips and records it.
CompareResult compare(const CompareOptions& options);

// DIR/compare.csv, DIR/heads.csv (and DIR/skipped.csv with allow_partial), each written atomically.
void write_compare_csvs(const CompareResult& result, const std::string& out_dir);

}  // namespace diffract::analysis
