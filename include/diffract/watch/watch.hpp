// `diffract watch RUN_DIR`: the spectra of a training run over its steps, as its checkpoints appear.
// Each checkpoint found in the run directory (run_directory.hpp) is analysed (and, with a base,
// compared with it) by the ordinary jobs, so its results are kept in the store under its content ids:
// a second watch over the same run computes only checkpoints it has not seen. The tables are the
// analyze and compare tables with a `step` column, plus checkpoints.csv, trends.csv and alerts.csv,
// rewritten as one directory after each checkpoint (a kill leaves the previous complete set).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/analysis/option_values.hpp"
#include "diffract/core/names.hpp"
#include "diffract/core/table.hpp"
#include "diffract/run/analyze.hpp"
#include "diffract/run/compare.hpp"
#include "diffract/run/options.hpp"
#include "diffract/watch/trends.hpp"

namespace diffract::watch {

struct WatchOptions {
    std::string run_dir;
    std::string base;                  // "" : none. Else every checkpoint is compared with it, and it is
                                       // the base of adapter checkpoints (BASE+ADAPTER)
    std::vector<std::string> metrics;  // resolved field names (resolve_metrics)
    bool heads = true;
    analysis::KernelConfig kernel;
    analysis::HeadRankOptions ranking;
    bool delta_only = false;  // with a base: compare's delta fields only (what head importance needs)
    bool follow = false;      // keep watching until interrupted or until_step
    std::int64_t every = 1;   // watch only steps that are multiples of it
    std::optional<std::int64_t> until_step;  // stop once a step at or past it is analysed; skip later ones
    double poll_seconds = 10;                // --follow: how often the directory is looked at
    double settle_seconds = 2;               // a checkpoint is read once nothing wrote to it for this long
    AlertThresholds thresholds;
    run::RunOptions run;  // run.out: the result directory (required)
    // A line for the user (a checkpoint analysed or skipped, an alert): the CLI prints it to stderr.
    std::function<void(const std::string&)> notice;
    // A warning ("watch: warning: ..."): an analysis's warning, an entry of the run directory that is
    // not a checkpoint. Given to `notice` when unset; the CLI prints it under --quiet too.
    std::function<void(const std::string&)> warning;
};

// What became of a checkpoint: `none` until the watch first decides (a checkpoint still `none` is not
// listed); named in checkpoints.csv by checkpoint_status_name.
enum class CheckpointStatus { none, analysed, reused, skipped, deleted };
inline constexpr NameTable<CheckpointStatus, 5> kCheckpointStatusNames{
    {{CheckpointStatus::none, ""},
     {CheckpointStatus::analysed, "analysed"},
     {CheckpointStatus::reused, "reused"},
     {CheckpointStatus::skipped, "skipped"},
     {CheckpointStatus::deleted, "deleted"}}};
std::string_view checkpoint_status_name(CheckpointStatus status);

// checkpoints.csv: every checkpoint found, and what became of it.
struct WatchedCheckpoint {
    std::int64_t step = 0;
    std::string name, path;
    bool adapter = false;
    CheckpointStatus status = CheckpointStatus::none;
    std::string note;  // why it was skipped
    std::size_t computed = 0, reused = 0;
};

struct WatchResult {
    std::vector<WatchedCheckpoint> checkpoints;  // by step
    Table metrics, aggregates, compare, heads;   // the analyze and compare tables with `step` first
    std::vector<Trend> trends;
    std::vector<Alert> alerts;
    std::vector<std::string> warnings;  // non-finite tensors
};

// The options as the CLI and Python spell them, validated into WatchOptions in one place.
struct WatchOptionText {
    std::string run_dir, out, base;
    std::string metrics = "default";
    bool heads = true;
    analysis::KernelOptionText kernel;  // --precision, --svd-route, --seed, --min-fit-size
    bool delta_only = false;
    bool follow = false;
    std::int64_t every = 1;
    std::optional<std::int64_t> until_step;
    double poll = 10, settle = 2;
    AlertThresholds thresholds;
    run::RunOptionText run;
};
WatchOptions parse_watch_options(const WatchOptionText& text);

// Runs the watch; with `follow`, until until_step or a cancellation (Cancelled, thrown after the
// tables of every finished checkpoint are written).
WatchResult watch(const WatchOptions& options);

Table checkpoints_table(const std::vector<WatchedCheckpoint>& checkpoints);

}  // namespace diffract::watch
