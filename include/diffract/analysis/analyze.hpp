// `analyze`: every selected matrix (and head block) of one or more models, through the SVD, into the
// metric catalog; results persist in the store so a re-run or a resumed run recomputes nothing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/selection.hpp"
#include "diffract/analysis/weightwatcher.hpp"
#include "diffract/core/progress.hpp"

namespace diffract::formats {
struct Checkpoint;
}

namespace diffract::analysis {

struct RunOptions {                // shared by every command that computes
    int threads = 0;               // 0: hardware concurrency
    std::uint64_t max_memory = 0;  // 0: half of physical memory
    std::string store_path;        // "" : ./.diffract/results.sqlite
    std::string device = "cpu";
    Selection selection;
    bool progress = true;
    ProgressSink progress_sink;  // a front end's own progress display (replaces the stderr line)
    // The result directory the caller will write ("" for none): checked against the inputs and the
    // store before anything is computed (check_output_path).
    std::string out;
    int resolved_threads() const;
    std::uint64_t resolved_max_memory() const;
    std::string resolved_store() const;  // store_path, or the default store
};

// Refuses `run.out` when it is, contains or lies inside one of `inputs` or the store.
void check_run_output(const RunOptions& run, const std::vector<formats::Checkpoint>& inputs);

// Writes the result directory `out_dir` with `files` (name -> contents) as a whole: written to a
// temporary sibling, then exchanged with the previous result directory, so a reader or a kill never
// sees a mix of two runs. An existing directory holding other files is refused, never replaced.
void write_result_directory(const std::string& out_dir, const std::map<std::string, std::string>& files);

// The run options as the CLI and Python spell them (--threads, --max-memory 8G, --roles a,b, ...),
// validated into RunOptions in one place so that both front ends accept and refuse alike.
struct RunOptionText {
    int threads = 0;
    std::string max_memory, store, device = "cpu";
    bool quiet = false;
    std::string roles, layers, match, exclude;
};
RunOptions parse_run_options(const RunOptionText& text);

struct AnalyzeOptions {
    std::vector<std::string> models;   // checkpoint specs (NAME=PATH allowed)
    std::vector<std::string> metrics;  // resolved field names (resolve_metrics)
    bool heads = true;
    KernelConfig kernel;
    RunOptions run;
    // One task per stored tensor (its whole matrix and heads, their values computed as one batch by
    // Backend::block_singular_values) instead of one per matrix. Default: on a device only — on the
    // CPU batching gains nothing and matrix-sized tasks balance better across threads. Tests set it.
    std::optional<bool> tensor_tasks;
    // weightwatcher: also weightwatcher.csv, WeightWatcher's columns and definitions per whole matrix.
    Convention convention = Convention::diffract;
};

struct MetricRow {
    std::string model, tensor;
    std::optional<int> layer;
    std::string role;
    std::optional<int> head;
    std::int64_t rows = 0, cols = 0;
    // NaN/Inf entries of the matrix as read at the run's precision; when > 0 the matrix was never
    // factorised and every field is NaN.
    std::int64_t nonfinite_count = 0;
    std::map<std::string, double> values;
};

struct AnalyzeResult {
    std::vector<std::string> fields;  // metrics.csv field columns, catalog order
    std::vector<MetricRow> rows;
    std::vector<std::pair<std::string, std::map<std::string, double>>> aggregates;  // per model
    std::size_t computed = 0, reused = 0;
    // One line per tensor with non-finite entries (nonfinite_warning): the CLI prints each as
    // "diffract: warning: <line>", Python issues a RuntimeWarning.
    std::vector<std::string> warnings;
    Convention convention = Convention::diffract;
    std::vector<WeightWatcherRow> weightwatcher;  // whole matrices, all models in order (weightwatcher)
};

AnalyzeResult analyze(const AnalyzeOptions& options);

// DIR/metrics.csv and DIR/aggregates.csv (and DIR/weightwatcher.csv under that convention), written
// as one directory.
void write_analyze_csvs(const AnalyzeResult& result, const std::string& out_dir);

// Number formatting shared by every CSV: shortest round-trip decimal, "nan" for NaN.
std::string format_value(double v);

}  // namespace diffract::analysis
