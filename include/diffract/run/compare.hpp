// The compare job: every selected matrix (and head block) of one or more models against a base model
// (analysis/compare.hpp), and the per-head update norms, importance score and ranking.
//
// A task is one tensor of the base (its whole matrix and head blocks) against every model. Results
// persist in the store, keyed by (model, base, tensor, block, compare configuration): a re-run reads
// nothing it has. Under MPI the tasks are split across ranks and rank 0 gathers the results
// (docs/compare.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/compare.hpp"
#include "diffract/analysis/expert_overlap.hpp"
#include "diffract/analysis/expert_ranking.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/options.hpp"
#include "diffract/run/unit_row.hpp"

namespace diffract::run {

// The inputs come opened by the front end (file-backed or in memory).
struct CompareOptions : analysis::CompareSettings {
    formats::Checkpoint base;
    std::vector<formats::Checkpoint> models;
    std::optional<formats::Checkpoint> reference;
    bool heads = true;
    bool allow_partial = false;
    // Whether a mismatch's message suggests --allow-partial (false where the caller has no such flag:
    // rewind's head ranking).
    bool suggest_allow_partial = true;
    analysis::HeadRankOptions ranking;
    // Components of each routed expert's read and write subspaces compared pairwise
    // (expert_overlap.csv; analysis/expert_overlap.hpp); 0: none.
    int overlap_k = analysis::kDefaultOverlapK;
    RunOptions run;
};

// compare's own options as the CLI and Python spell them (--top-k, --scale-scope, --order, --seed,
// --precision, --svd-route, --no-heads, --allow-partial, --delta-only, --overlap-k), with their defaults
// written here once: the CLI's arguments inherit this struct, Python binds it, and both convert it with
// apply_compare_options, so they accept, refuse and default alike.
struct CompareOptionText {
    int top_k = analysis::kDefaultTopK;
    std::string scale_scope = "global", order = "importance";
    std::uint64_t seed = 42;
    std::string precision = "f64", svd_route = "auto";
    bool heads = true, allow_partial = false, delta_only = false;
    int overlap_k = analysis::kDefaultOverlapK;
};
// Sets o's comparison settings, head ranking, heads, allow_partial (also o.run's selection: call it after
// o.run is set), delta_only and overlap_k from the text; throws InputError naming the flag of a bad value.
void apply_compare_options(const CompareOptionText& text, CompareOptions& o);

struct CompareRow : UnitRow {
    std::string base;
};

struct SkippedItem {
    std::string model, tensor, block, reason;  // block: "" (whole tensor) or "heads"
};

struct CompareResult {
    std::vector<CompareRow> rows;
    std::vector<analysis::HeadRow> heads;
    std::vector<analysis::ExpertRow> experts;  // a mixture of experts' (analysis/expert_ranking.hpp)
    // Its routed experts' pairwise subspace overlaps (analysis/expert_overlap.hpp), with overlap_k > 0.
    std::vector<analysis::ExpertOverlapRow> expert_overlap;
    std::vector<SkippedItem> skipped;
    analysis::HeadRankOptions ranking;
    bool allow_partial = false;
    std::size_t computed = 0, reused = 0;  // (model, matrix) pairs
    std::vector<WorkCounts> per_model;     // the same, per model in order (the reference last)
    std::size_t whole_route = 0;           // of the computed: on the whole-matrix route (gesdd or fallback)
    // One line per tensor (of the base or a model) with non-finite entries (nonfinite_warning).
    std::vector<std::string> warnings;
    // Conclusions the tables alone would hide: a model whose heads' updates are uniform (no head
    // stands out: note_uniform_update), whose importance ranking then orders noise.
    std::vector<std::string> findings;
};

// Throws InputError on the first mismatch between a model and the base (different shape, missing or
// extra tensor, different head geometry) unless allow_partial, which skips and records it.
CompareResult compare(const CompareOptions& options);

// DIR/compare.csv, DIR/heads.csv (and DIR/skipped.csv with allow_partial, DIR/experts.csv and
// DIR/expert_overlap.csv for a mixture of experts), each written atomically.
void write_compare_csvs(const CompareResult& result, const std::string& out_dir);

}  // namespace diffract::run
