// What a run's checkpoints show over steps: a trend per unit and field (first and last value, slope,
// the step where it crossed a threshold) and the alerts the field's rules of thumb raise.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diffract/core/names.hpp"
#include "diffract/core/table.hpp"
#include "diffract/model/schema.hpp"

namespace diffract::watch {

// The table an observation comes from. Declared in the order of the names (trends.csv lists the units
// sorted by source, then tensor, layer and head).
enum class Source { compare, heads, metrics };
inline constexpr NameTable<Source, 3> kSourceNames{
    {{Source::compare, "compare"}, {Source::heads, "heads"}, {Source::metrics, "metrics"}}};

// One unit's values at one step: a matrix or head block (metrics.csv, compare.csv rows), or a head's
// update statistics (heads.csv rows).
struct Observation {
    Source source = Source::metrics;
    std::string tensor;  // "" for heads.csv rows
    std::optional<int> layer;
    std::optional<model::Role> role;  // none for heads.csv rows
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
    Source source = Source::metrics;
    std::string tensor;
    std::optional<model::Role> role;
    std::string field;
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

// The rules of thumb (docs/watch.md), one row each in kAlertRules: its name (alerts.csv's kind), the
// field it watches, and whether it is a range rule (raised when a unit enters the range, not again while
// it stays) or a jump between consecutive checkpoints. AlertThresholds holds their thresholds.
enum class AlertKind { over_fit, under_trained, alpha_jump, stable_rank_jump, head_concentration };
struct AlertRule {
    AlertKind kind;
    std::string_view name, field;
    bool range;
};
inline constexpr std::array<AlertRule, 5> kAlertRules{{
    {AlertKind::over_fit, "over_fit", "pl_alpha", true},
    {AlertKind::under_trained, "under_trained", "pl_alpha", true},
    {AlertKind::alpha_jump, "alpha_jump", "pl_alpha", false},
    {AlertKind::stable_rank_jump, "stable_rank_jump", "stable_rank", false},
    {AlertKind::head_concentration, "head_concentration", "update_norm", true},
}};
static_assert([] {
    for (std::size_t i = 0; i < kAlertRules.size(); ++i)
        if (static_cast<std::size_t>(kAlertRules[i].kind) != i) return false;
    return true;
}());
constexpr const AlertRule& alert_rule(AlertKind k) { return kAlertRules[static_cast<std::size_t>(k)]; }
constexpr std::string_view alert_kind_name(AlertKind k) { return alert_rule(k).name; }

struct Alert {
    std::int64_t step = 0;
    AlertKind kind = AlertKind::over_fit;
    std::string tensor;
    std::optional<model::Role> role;
    std::string field;
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
