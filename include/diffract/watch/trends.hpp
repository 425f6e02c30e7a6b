// What a run's checkpoints show over steps: a trend per unit and field (first and last value, slope,
// the step where it crossed a threshold) and the alerts the field's rules of thumb raise.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diffract/core/table.hpp"

namespace diffract::watch {

// One unit's values at one step: a matrix or head block (metrics.csv, compare.csv rows), or a head's
// update statistics (heads.csv rows).
struct Observation {
    std::string source;  // "metrics", "compare" or "heads": the table it comes from
    std::string tensor;  // "" for heads.csv rows
    std::optional<int> layer;
    std::string role;
    std::optional<int> head;
    std::int64_t step = 0;
    std::map<std::string, double> values;  // numeric fields only
};

// The thresholds of the alerts, each with where it comes from (docs/watch.md).
struct AlertThresholds {
    // WeightWatcher's rule for a layer's power-law exponent (Martin & Mahoney; weightwatcher's README):
    // alpha in [2, 6] is well trained, below 2 over-fit, above 6 under-trained.
    double alpha_low = 2, alpha_high = 6;
    // Between consecutive checkpoints: |Δ pl_alpha| above alpha_jump (a quarter of the well-trained
    // band), or a stable rank changing by more than stable_rank_jump of its previous value.
    double alpha_jump = 1.0, stable_rank_jump = 0.2;
    // Head updates concentrating in few heads: the largest tenth of the heads (at least one) holding
    // more than head_share of the model's squared head-update norm (uniform updates: about a tenth).
    double head_share = 0.5;
};

struct Trend {
    std::string source, tensor, role, field;
    std::optional<int> layer, head;
    std::size_t checkpoints = 0;  // steps with a finite value
    std::int64_t first_step = 0, last_step = 0;
    double first = 0, last = 0, change = 0, min = 0, max = 0;
    double slope = 0;  // least-squares change per step (NaN with one checkpoint)
    // The first step whose value lies across a threshold from the first value (pl_alpha: alpha_low,
    // alpha_high), and that threshold.
    std::optional<std::int64_t> crossed_step;
    std::optional<double> threshold;
};

struct Alert {
    std::int64_t step = 0;
    std::string kind;  // over_fit | under_trained | alpha_jump | stable_rank_jump | head_concentration
    std::string tensor, role, field;
    std::optional<int> layer, head;
    double value = 0, previous = 0, threshold = 0;  // previous: NaN where the rule has none
    std::string message;                            // one line, without the step
};

// Trends of every unit and numeric field observed at two or more steps, or at one.
std::vector<Trend> trends(const std::vector<Observation>& observations, const AlertThresholds& thresholds);

// The alerts, in step order. A range alert (over_fit, under_trained, head_concentration) is raised at
// the step a unit enters the range (its first checkpoint included), not again while it stays there.
std::vector<Alert> alerts(const std::vector<Observation>& observations, const AlertThresholds& thresholds);

Table trends_table(const std::vector<Trend>& trends);
Table alerts_table(const std::vector<Alert>& alerts);

}  // namespace diffract::watch
