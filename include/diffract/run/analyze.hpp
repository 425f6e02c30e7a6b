// The analyze job: every selected matrix (and head block) of one or more models, through the SVD, into
// the metric catalog (analysis/catalog.hpp), as a resumable job (job.hpp): results persist in the store so
// a re-run or a resumed run recomputes nothing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/weightwatcher.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/options.hpp"
#include "diffract/run/unit_row.hpp"

namespace diffract::run {

struct AnalyzeOptions {
    std::vector<formats::Checkpoint> models;  // opened by the front end (file-backed or in memory)
    std::vector<std::string> metrics;         // resolved field names (resolve_metrics)
    bool heads = true;
    analysis::KernelConfig kernel;
    RunOptions run;
    // One task per stored tensor (its whole matrix and heads, their values computed as one batch by
    // Backend::block_singular_values) instead of one per matrix. Default: on a device only — on the
    // CPU batching gains nothing and matrix-sized tasks balance better across threads. Tests set it.
    std::optional<bool> tensor_tasks;
    // weightwatcher: also weightwatcher.csv, WeightWatcher's columns and definitions per whole matrix.
    analysis::Convention convention = analysis::Convention::diffract;
};

using MetricRow = UnitRow;

// One model's aggregates over the whole matrices of one of its components.
struct ModelAggregates {
    std::string model;
    model::Component component = model::Component::language;
    std::map<std::string, double> values;
};

struct AnalyzeResult {
    std::vector<std::string> fields;  // metrics.csv field columns, catalog order
    std::vector<MetricRow> rows;
    // Per model and component (the language model, each tower): aggregates never pool components.
    std::vector<ModelAggregates> aggregates;
    std::size_t computed = 0, reused = 0;
    std::vector<WorkCounts> per_model;  // the same, per model in order
    // The computed units' share of the run's work (their SVD cost estimates over every unit's): a resumed
    // run's hundreds of computed head blocks may be a few percent of it.
    double computed_work = 0;
    // One line per tensor with non-finite entries (nonfinite_warning): the CLI prints each as
    // "diffract: warning: <line>", Python issues a RuntimeWarning.
    std::vector<std::string> warnings;
    analysis::Convention convention = analysis::Convention::diffract;
    std::vector<analysis::WeightWatcherRow>
        weightwatcher;  // whole matrices, all models in order (weightwatcher)
};

AnalyzeResult analyze(const AnalyzeOptions& options);

// DIR/metrics.csv and DIR/aggregates.csv (and DIR/weightwatcher.csv under that convention), written
// as one directory.
void write_analyze_csvs(const AnalyzeResult& result, const std::string& out_dir);

}  // namespace diffract::run
