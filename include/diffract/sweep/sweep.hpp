// `sweep`: a grid of edited candidates, each written to a temporary directory, scored by the user's
// evaluation command, and summarised as curves (curve.csv) and areas under them (summary.json).
//
// Resumable: every evaluated candidate is appended to DIR/sweep_state.jsonl (its order, seed, x,
// content and scores); a restarted sweep with the same configuration skips what is recorded. Two
// candidates with the same content (e.g. fraction 0 in every ordering) are evaluated once.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffract/analysis/analyze.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/edit/edit.hpp"

namespace diffract::sweep {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A shell command with `{model}` standing for the candidate's path (inserted single-quoted). Its
// score: the last number printed on stdout, or with `score_key` the field (dotted path) of the last
// stdout line that is a JSON object holding it.
struct EvalCommand {
    std::string command;
    std::string score_key;
    bool empty() const { return command.empty(); }
};

// Runs the command; throws InputError naming the flag when it fails or prints no score.
double evaluate(const EvalCommand& e, const std::string& model_path, const std::string& flag);
double parse_score(const std::string& stdout_text, const std::string& score_key, const std::string& flag);

struct SweepConfig {
    std::string out_dir;
    EvalCommand eval;  // the curve's score (may be empty when select and report are given)
    EvalCommand select_eval, report_eval;  // pick x on one evaluation, report on another
    bool keep = false;                     // keep candidates in DIR/candidates/
    bool quiet = false;
    std::int64_t max_candidates = edit::kDefaultMaxCandidates;  // more candidates are refused
    std::uint64_t candidate_bytes = 0;  // a candidate's size on disk, when known (free-space check)
    nlohmann::json fingerprint;         // what the journal is recorded for; a different one refuses to resume
};

struct Candidate {
    std::string order;  // e.g. "importance", "random", "keep", "omega", "each"
    std::uint64_t seed = 0;
    double x = 0;
    std::string label;    // directory name
    std::string content;  // candidates with equal content are evaluated once
    std::function<void(const std::string& dir)> build;
};

struct Record {
    std::string order;
    std::uint64_t seed = 0;
    double x = 0;
    std::string content;
    double score = kNaN, select_score = kNaN, report_score = kNaN;
    double curve_score() const { return std::isnan(score) ? select_score : score; }
};

// Builds, evaluates and deletes (unless keep) each candidate not in the journal; returns a record per
// candidate, in order. Refuses (InputError) more than config.max_candidates candidates, and a disk
// without room for the candidates still to build (all of them with keep, else one) when
// config.candidate_bytes is known.
std::vector<Record> run_candidates(const SweepConfig& config, const std::vector<Candidate>& candidates);

// Trapezoid area under (x, y), sorted by x.
double trapezoid_auc(std::vector<std::pair<double, double>> points);

// DIR/curve.csv (order,seed,x,score[,select_score,report_score]) and DIR/summary.json: per ordering the
// AUC of each seed's curve, their mean and standard deviation (n − 1), the difference and ratio to the
// random ordering's mean AUC (when random was swept) and z = (auc − random mean) / random std; with
// select/report evaluations, per curve the x of the best select score and the report score there.
nlohmann::json summarize(const SweepConfig& config, const std::string& kind,
                         const std::vector<Record>& records);
void write_outputs(const SweepConfig& config, const std::string& kind, const std::vector<Record>& records);

// ---- The sweeps -----------------------------------------------------------------------------------

struct RewindSweep {
    std::string base, model, reference;  // checkpoint specs
    std::vector<analysis::HeadOrder> orders = {analysis::HeadOrder::importance, analysis::HeadOrder::random};
    int seeds = 5;  // random orderings
    std::uint64_t first_seed = 0;
    analysis::ScaleScope scope = analysis::ScaleScope::global;
    edit::KvPolicy kv = edit::KvPolicy::all;
    std::vector<double> fractions;
    edit::EditCommon common;
    analysis::RunOptions run;  // the head scores (compare)
};
void sweep_rewind(const SweepConfig& config, const RewindSweep& sweep);
// One head at a time: DIR/heads_effect.csv (layer,head,score,delta,greedy_rank) with delta = score −
// the unedited model's score; greedy_rank 0 = the head whose rewind raises the score most.
void sweep_rewind_each(const SweepConfig& config, const RewindSweep& sweep);

struct TruncateSweep {
    std::string base, model;
    std::vector<double> keeps;
    edit::EditCommon common;
};
void sweep_truncate(const SweepConfig& config, const TruncateSweep& sweep);

struct InterpolateSweep {
    std::string a, b;
    std::vector<double> omegas;
    edit::EditCommon common;
};
void sweep_interpolate(const SweepConfig& config, const InterpolateSweep& sweep);

}  // namespace diffract::sweep
