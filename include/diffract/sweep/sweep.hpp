// `sweep`: a grid of edited candidates, each written to a temporary directory, scored by the user's
// evaluation command, and summarised as curves (curve.csv) and areas under them (summary.json).
//
// Resumable: every evaluated candidate is appended to DIR/sweep_state.jsonl (its order, seed, x,
// content, scores and evaluation time), and so is each reference point (the inputs evaluated as they
// are); a restarted sweep with the same configuration skips what is recorded. Two candidates with the
// same content (e.g. fraction 0 in every ordering) are evaluated once.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/analysis/head_ranking.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/core/table.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/run/analyze.hpp"
#include "diffract/sweep/kind.hpp"

namespace diffract::sweep {

// A shell command with `{model}` standing for the candidate's path and `{python}` for the front end's
// Python interpreter (`python`: Python's sys.executable, the CLI's $DIFFRACT_PYTHON or python3 from
// PATH), each inserted single-quoted. Its score: the last number printed on stdout, or with `score_key` the
// field (dotted path) of the last stdout line that is a JSON object holding it.
// --eval-timeout's default: 6 hours, well above a perplexity evaluation of a 7B model on a held-out
// set, and a bound on a command that never ends.
constexpr double kDefaultEvalTimeout = 6 * 3600;

struct EvalCommand {
    std::string command;  // the shell command; with `in_process`, its description (journal, messages)
    std::string score_key;
    // What `{python}` stands for in the command; a command naming `{python}` with none is an InputError.
    // Not part of the journal's fingerprint (the command is, with `{python}` as written).
    std::string python = {};
    // A command running longer is ended with every process it started (its process group) and the
    // sweep stops as bad input; 0: no limit.
    double timeout_seconds = kDefaultEvalTimeout;
    // An evaluator run in this process instead of the shell (the Python bindings' callables): it
    // receives the candidate's path and returns the score; what it prints is not logged.
    std::function<double(const std::string& model_path)> in_process;
    bool empty() const { return command.empty() && !in_process; }
};

// Runs the evaluation on model_path. A shell command's stdout and stderr are appended to log_path as
// they arrive (after a line naming the flag and the command; the score is parsed from the stdout);
// throws InputError naming the flag and the log when it fails or prints no score.
// One evaluation: its score and, when the evaluator printed them, its per-chunk scores (parse_chunks).
struct Evaluation {
    double score;
    std::vector<double> chunks;
};
Evaluation evaluate(const EvalCommand& e, const std::string& model_path, const std::string& flag,
                    const std::string& log_path);
double parse_score(const std::string& stdout_text, const std::string& score_key, const std::string& flag);
// The per-chunk scores an evaluator may print beside its score, in the JSON line: "chunks": [c1, ...]
// (values of the score, one per chunk of its data, the same chunks for every model), or "chunks":
// {"FIELD": [...], ...} with a list per score field (the --score-key's last component, else the
// line's last member). Empty when there are none; a non-finite entry is an InputError.
std::vector<double> parse_chunks(const std::string& stdout_text, const std::string& score_key,
                                 const std::string& flag);

struct SweepConfig {
    std::string out_dir;
    EvalCommand eval;  // the curve's score (may be empty when select and report are given)
    EvalCommand select_eval, report_eval;  // pick x on one evaluation, report on another
    bool keep = false;                     // keep candidates in DIR/candidates/
    int quiet = 0;                         // 1: no progress lines; 2: no summary lines either
    // When set, the progress (evaluations done of this run's total) goes to it, labelled "sweep",
    // instead of the stderr lines: Python's progress=True bar.
    ProgressSink progress;
    std::int64_t max_candidates = edit::kDefaultMaxCandidates;  // more candidates are refused
    std::uint64_t candidate_bytes = 0;  // a candidate's size on disk, when known (free-space check)
    nlohmann::json fingerprint;         // what the journal is recorded for; a different one refuses to resume
    // Whether lower scores are better (score_direction.hpp); nullopt: unknown (no best x is picked).
    std::optional<bool> lower_is_better = std::nullopt;
};

struct Candidate {
    Order order = Order::unedited;
    std::uint64_t seed = 0;
    double x = 0;
    std::string label;    // directory name (and DIR/logs/LABEL.log)
    std::string content;  // candidates with equal content are evaluated once
    std::function<void(const std::string& dir)> build;
    // The role of a reference whose weights this candidate's equal byte for byte (rewinding no head,
    // interpolating at ω = 0 or 1): it takes that reference's scores, never built or evaluated again.
    std::optional<RefRole> same_as = std::nullopt;
    // Counts written after x in curve.csv (what a rewind puts back: query_heads, kv_blocks, parameters).
    std::vector<std::pair<std::string, std::int64_t>> columns = {};
};

// What the evaluations of one model gave: each evaluation's score (NaN when not run) and the wall
// seconds of all of them together.
struct Scores {
    double score = kNaN, select_score = kNaN, report_score = kNaN;
    double eval_seconds = kNaN;
    // The curve evaluation's per-chunk scores (--eval's, else --select-eval's), when printed: the
    // summary's interval over evaluation chunks.
    std::vector<double> chunks = {};
    double curve_score() const { return std::isnan(score) ? select_score : score; }
};

struct Record {
    Order order = Order::unedited;
    std::uint64_t seed = 0;
    double x = 0;
    std::string content;
    Scores scores;  // a candidate whose content was evaluated before reuses that evaluation's
    std::vector<std::pair<std::string, std::int64_t>> columns = {};  // the candidate's
    double curve_score() const { return scores.curve_score(); }
};

// A reference point: an input checkpoint evaluated as it is, once per sweep (rewind and truncate:
// "base" and "model"; interpolate: "a" and "b"). `path` is what the evaluation received.
struct ReferenceInput {
    RefRole role;
    const formats::Checkpoint* checkpoint = nullptr;
};
struct Reference {
    RefRole role;
    std::string path;
    Scores scores;
};

struct SweepRun {
    std::vector<Reference> references;  // in the order given
    std::vector<Record> records;        // one per candidate, in order
    std::vector<std::string> lines;     // what the engine says when done (SweepOutputs::lines)
    std::optional<edit::RewindUnit> unit = std::nullopt;  // a rewind sweep's: summary.json's "unit"
};

// Evaluates each reference, then builds, evaluates and deletes (unless keep) each candidate, skipping
// what the journal holds; returns the references and a record per candidate. Each evaluation's output
// goes to DIR/logs/LABEL.log (references: DIR/logs/reference-ROLE.log). Refuses (InputError) more than
// config.max_candidates candidates, and a disk without room for the candidates still to build (all of
// them with keep, else one) when config.candidate_bytes is known.
SweepRun run_candidates(const SweepConfig& config, const std::vector<ReferenceInput>& references,
                        const std::vector<Candidate>& candidates);

// Trapezoid area under (x, y), sorted by x.
double trapezoid_auc(std::vector<std::pair<double, double>> points);

// DIR/curve.csv (order,seed,x,score[,select_score,report_score],eval_seconds) and DIR/summary.json: per
// ordering the AUC of each seed's curve, their mean and standard deviation (n − 1), the difference and
// ratio to the random ordering's mean AUC (when random was swept) and z = (auc − random mean) / random
// std; with select/report evaluations, per curve the x of the best select score and the report score
// there; the references (and, when there is a "model" reference, its score as `baseline`).
nlohmann::json summarize(const SweepConfig& config, Kind kind, const SweepRun& run);
// curve.csv's table.
Table curve_table(const SweepConfig& config, const SweepRun& run);

// What a sweep wrote, returned so that a caller (Python) has it without reading the files back: the
// table of curve.csv (heads_effect.csv for rewind-each) and the text of summary.json.
struct SweepOutputs {
    Table table;
    std::string summary;
    // What the front end prints on stderr when the sweep is done, as analyze and compare return theirs:
    // warnings (each after "diffract: warning: "), then the closing lines (none with quiet >= 2).
    std::vector<std::string> warnings = {}, lines = {};
};
SweepOutputs write_outputs(const SweepConfig& config, Kind kind, const SweepRun& run);
// summary.json's "score_key" (the JSON field the score is read from), when one was given: the report
// names its axes by it.
void add_score_key(const SweepConfig& config, nlohmann::ordered_json& summary);
// summary.json's "references": {ROLE: {score, [select_score, report_score,] eval_seconds, path}}.
nlohmann::ordered_json references_json(const SweepConfig& config, const std::vector<Reference>& references);

// ---- The sweeps -----------------------------------------------------------------------------------

// The checkpoints come opened by the front end (on disk: every evaluation reads a model from a path).
// With unit experts the units are a mixture of experts' routed experts (compare's expert ranking; every
// matrix of an expert rewound; random sets matched in experts and weight entries) instead of heads.
struct RewindSweep {
    formats::Checkpoint base, model;
    edit::RewindUnit unit = edit::RewindUnit::heads;
    std::optional<formats::Checkpoint> reference;
    std::vector<analysis::HeadOrder> orders = {analysis::HeadOrder::importance, analysis::HeadOrder::random};
    int seeds = 5;  // random orderings
    std::uint64_t first_seed = 0;
    analysis::ScaleScope scope = analysis::ScaleScope::global;
    edit::KvPolicy kv = edit::KvPolicy::all;
    std::vector<double> fractions;
    edit::EditCommon common;
    run::RunOptions run;  // the head scores (compare)
};
SweepOutputs sweep_rewind(const SweepConfig& config, const RewindSweep& sweep);
// One head at a time: DIR/heads_effect.csv (layer,head,score,delta,greedy_rank) with delta = score −
// the unedited model's score; greedy_rank 0 = the head whose rewind raises the score most. Unit
// experts: DIR/experts_effect.csv (layer,expert,...).
SweepOutputs sweep_rewind_each(const SweepConfig& config, const RewindSweep& sweep);

// The head ranking checked against what rewinding heads does (docs/edit.md, "Validating a ranking"):
// every head rewound alone (its harm: the score lost against the unedited model) correlated with its
// importance (Spearman, bootstrap interval over the heads, permutation p-value); the k least and the k
// most important heads rewound together, each against random sets matched to it (as many query heads
// in as many K/V groups: the same weight rewound); with a second reference, the ranking's stability
// (Kendall tau-b between the two importance rankings, the heads that move most). Writes
// DIR/heads_validation.csv, DIR/sets.csv and DIR/summary.json (with a plain verdict), prints the verdict.
// Unit experts: the same with routed experts (DIR/experts_validation.csv; the random sets hold as many
// experts of each size).
struct ValidateSweep {
    RewindSweep rewind;  // base, model, reference, scale scope, K/V policy, edit and run options
    std::optional<formats::Checkpoint> second_reference;
    int k = 0;  // heads per set; 0: a quarter of the heads, at least 1
    int seeds = 5;
    std::uint64_t first_seed = 0;
    bool lower_is_better = false;  // the score's direction (perplexity, loss: lower)
    int draws = 2000;              // bootstrap resamples and permutations
};
SweepOutputs sweep_validate(const SweepConfig& config, const ValidateSweep& sweep);

struct TruncateSweep {
    formats::Checkpoint base, model;
    std::vector<double> keeps;
    edit::EditCommon common;
};
SweepOutputs sweep_truncate(const SweepConfig& config, const TruncateSweep& sweep);

struct InterpolateSweep {
    formats::Checkpoint a, b;
    std::vector<double> omegas;
    edit::EditCommon common;
};
SweepOutputs sweep_interpolate(const SweepConfig& config, const InterpolateSweep& sweep);

}  // namespace diffract::sweep
