// What a report is drawn from: the rows of analyze (metrics.csv), compare (compare.csv, heads.csv, and
// for a mixture of experts experts.csv and expert_overlap.csv) and sweep (curve.csv, summary.json) result
// directories, or of a results store; and, from the store only, the singular values of each matrix (the ESD
// figure).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/expert_overlap.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/edit/rewind_unit.hpp"
#include "diffract/model/schema.hpp"
#include "diffract/sweep/kind.hpp"

namespace diffract::report {

// One matrix or head block of one model (metrics.csv / compare.csv row, or store results).
struct Record {
    std::string model, base, tensor, role;         // base: compare rows only
    std::optional<analysis::Precision> precision;  // what computed it (none when the input does not say)
    std::optional<int> layer, head;
    std::optional<std::int64_t> step;  // a watch directory's step column (exact: never through a double)
    std::map<std::string, double> values;
    double value(const std::string& field) const;  // NaN when absent
};

// One heads.csv row: a head's update norms in its model and in the reference, and its importance.
struct HeadScore {
    std::string model, reference;
    int layer = 0, head = 0;
    double update_norm = 0, ref_update_norm = 0, importance = 0, agreement = 0;
    std::optional<std::int64_t> step;  // a watch directory's step column
};

// One experts.csv row: a routed expert of a layer (with its index), or the layer's shared experts.
struct ExpertScore {
    std::string model, reference;
    int layer = 0;
    std::optional<int> expert;  // none for the shared experts
    model::ExpertKind kind = model::ExpertKind::routed;
    double update_norm = kNaN, ref_update_norm = kNaN, importance = kNaN;
    double router_angle = kNaN;  // router_angle_degrees: NaN for shared experts or without a router
    bool stands_out = false;
};

// One expert_overlap.csv row: a pair of a layer's routed experts on one side, in the base and the model.
struct ExpertPair {
    std::string model;
    int layer = 0, expert_a = 0, expert_b = 0;
    analysis::SubspaceSide side = analysis::SubspaceSide::read;
    double overlap_base = kNaN, overlap = kNaN;
    bool above_chance = false;  // the model's overlap is above the chance floor's 99th percentile
};

// One alerts.csv row of a watch directory: a rule of thumb that fired at a step.
struct WatchAlert {
    std::int64_t step = 0;
    std::string kind, tensor, role, field, message;
    std::optional<int> layer;
};

// One sweep (curve.csv): score(s) against x for each head ordering and seed.
struct SweepPoint {
    std::string order;
    long long seed = 0;
    double x = 0;
    std::vector<double> scores;  // one per Sweep::score_columns
    double eval_seconds = kNaN;  // curve.csv's eval_seconds
};
// A model evaluated once beside the sweep (summary.json's "references": the base, the unedited
// model, or an interpolation's endpoints), drawn as a labelled line.
struct SweepReference {
    std::string key;                       // "base", "model", ... as summary.json names it
    std::map<std::string, double> scores;  // "score", or per score column ("score_math")
    double eval_seconds = kNaN;
};
// The score's name and direction, as the y axes say it: summary.json's "score_key" (else "score") and
// "direction" (null: unknown), else, in a summary written before sweeps wrote their direction, the one
// its score_key implies by the sweeps' rule (sweep::key_lower_is_better).

struct ScoreAxis {
    std::string key = "score";
    std::optional<bool> lower_is_better;
    std::string label() const;  // "perplexity (lower is better)"
};

struct Sweep {
    std::string name, source;
    std::optional<sweep::Kind> kind;  // parsed once from summary.json or the name; nullopt: a generic sweep
    edit::RewindUnit unit = edit::RewindUnit::heads;  // a rewind sweep's (summary.json's "unit")
    std::vector<std::string> score_columns;
    std::vector<SweepPoint> points;
    std::optional<double> baseline;  // summary.json's score of the unedited model, when given
    std::vector<SweepReference> references;
    ScoreAxis axis;
};

// What rewinding single heads did: a rewind-each sweep (heads_effect.csv: delta, the score change) or
// a validation (heads_validation.csv: harm, the score lost, with each head's importance, and the sets).
// The same for experts (experts_effect.csv, experts_validation.csv): `head` is then the expert.
struct HeadEffect {
    int layer = 0, head = 0;
    double change = kNaN;  // score − the unedited model's
    double importance = kNaN;
};
struct SetEffect {
    std::string set;  // bottom | top | random_bottom | random_top
    double change = kNaN;
};
struct HeadEffects {
    std::string name, source;
    sweep::Kind kind = sweep::Kind::rewind_each;      // rewind_each | validate
    edit::RewindUnit unit = edit::RewindUnit::heads;  // the units rewound one at a time (`heads` below)
    std::vector<HeadEffect> heads;
    std::vector<SetEffect> sets;       // validate only
    std::vector<std::string> verdict;  // validate: summary.json's sentences
    std::optional<double> spearman, ci_low, ci_high;
    ScoreAxis axis;
};

// The singular values of one whole matrix and the scalar fields stored with them.
struct Spectrum {
    std::string model, tensor;
    std::vector<double> svals;
    std::map<std::string, double> values;
};

// The singular values of one compare unit's update ΔW = W_model − W_base (store field delta_svals).
struct DeltaSpectrum {
    std::string model, base, tensor, role;
    std::optional<int> layer;
    std::vector<double> svals;  // as stored: ascending
};

struct ReportData {
    std::vector<Record> metrics;  // analyze
    std::vector<Record> compare;  // compare (cross-model)
    std::vector<HeadScore> heads;
    std::vector<ExpertScore> experts;      // experts.csv
    std::vector<ExpertPair> expert_pairs;  // expert_overlap.csv
    std::vector<Sweep> sweeps;
    std::vector<HeadEffects> head_effects;  // rewind-each and validate directories
    std::vector<WatchAlert> alerts;         // watch directories
    std::vector<Spectrum> spectra;
    std::vector<DeltaSpectrum> deltas;      // whole matrices only
    std::vector<std::string> store_models;  // every name the store holds results under
    bool store_loaded = false;
    std::vector<std::string> models;  // in order of first appearance
    std::vector<std::string> notes;   // what was skipped, and why
    void add_model(const std::string& name);
    // The precision the metric and compare rows were computed in, for the page's header: "f64 (all 158
    // rows)", "f32 (31 of 328 rows in f64: ...)"; "" when no input says.
    std::string precision_summary() const;
};

// Reads every result file present in DIR (metrics.csv, compare.csv, heads.csv, experts.csv,
// expert_overlap.csv, curve.csv + summary.json, heads_effect.csv, heads_validation.csv, a watch's
// alerts.csv). Throws InputError if DIR does not exist or holds none of them, or a file is malformed.
void load_result_dir(const std::string& dir, ReportData& data);

// experts.csv and expert_overlap.csv (data_experts.cpp): the columns the expert atlas draws are required
// and checked, a bad one an InputError naming the file, line and column.
void read_experts(const std::string& path, ReportData& data);
void read_expert_overlap(const std::string& path, ReportData& data);

// Reads a results store: the spectra (whole matrices with weights_svals) and the update spectra
// (whole-matrix compare results with delta_svals) always, and, when
// `with_records`, every scalar result as metrics/compare records (a report from a store alone).
void load_store(const std::string& path, ReportData& data, bool with_records);

}  // namespace diffract::report
