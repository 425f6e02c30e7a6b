// The sweep engine: the reference points, then each candidate built, evaluated (logs in DIR/logs/),
// journaled and deleted, with progress and the time left on stderr.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "diffract/core/cancel.hpp"
#include "diffract/core/csv_field.hpp"
#include "diffract/core/error.hpp"
#include "diffract/sweep/sweep.hpp"
#include "journal.hpp"

namespace fs = std::filesystem;

namespace diffract::sweep {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string duration_text(double s) {
    const auto whole = static_cast<long long>(std::llround(s));
    if (whole < 60) return fmt::format("{} s", whole);
    if (whole < 3600) return fmt::format("{} min {:02} s", whole / 60, whole % 60);
    return fmt::format("{} h {:02} min", whole / 3600, whole % 3600 / 60);
}

// Progress on stderr: one line per evaluation with how many of this run's evaluations are done, the
// time since the start and the time left, from the mean build + evaluation time so far.
class Progress {
public:
    Progress(std::size_t total, bool quiet, ProgressSink sink)
        : total_(total), quiet_(quiet), sink_(std::move(sink)) {
        if (sink_) sink_(0, total_, "sweep");
    }

    void evaluated(const std::string& what, const Scores& s, double busy_seconds) {
        ++done_;
        busy_ += busy_seconds;
        if (sink_) {
            sink_(done_, total_, "sweep");
            return;
        }
        if (quiet_) return;
        const double left = busy_ / static_cast<double>(done_) * static_cast<double>(total_ - done_);
        fmt::print(stderr, "sweep [{}/{}] {}: score {} ({:.1f} s); elapsed {}, ETA {}\n", done_, total_, what,
                   format_value(s.curve_score()), busy_seconds, duration_text(seconds_since(start_)),
                   duration_text(left));
    }

private:
    Clock::time_point start_ = Clock::now();
    std::size_t total_, done_ = 0;
    double busy_ = 0;
    bool quiet_;
    ProgressSink sink_;
};

// Removes a candidate or scratch directory; one that cannot be removed is an error naming it, never
// a sweep that ends with a whole checkpoint left behind.
void remove_checked(const fs::path& dir) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) throw InputError(fmt::format("{}: cannot remove the candidate: {}", dir.string(), ec.message()));
}

// Every evaluation the configuration asks for, on one model, its output in a fresh log.
Scores evaluate_all(const SweepConfig& c, const std::string& model_path, const fs::path& log) {
    std::error_code ec;
    fs::remove(log, ec);  // what an interrupted run left
    Scores s;
    const auto start = Clock::now();
    if (!c.eval.empty()) {
        auto e = evaluate(c.eval, model_path, "--eval", log.string());
        s.score = e.score, s.chunks = std::move(e.chunks);
    }
    if (!c.select_eval.empty()) {
        auto e = evaluate(c.select_eval, model_path, "--select-eval", log.string());
        s.select_score = e.score;
        if (c.eval.empty()) s.chunks = std::move(e.chunks);  // the curve's evaluation
    }
    if (!c.report_eval.empty())
        s.report_score = evaluate(c.report_eval, model_path, "--report-eval", log.string()).score;
    s.eval_seconds = seconds_since(start);
    return s;
}

// A reference is evaluated on its input as it is; a LoRA model (BASE+ADAPTER) is first written merged
// (interpolation at ω = 0 copies its tensors byte for byte) to `scratch`, removed afterwards.
Reference evaluate_reference(const SweepConfig& c, const ReferenceInput& in, const fs::path& scratch,
                             const fs::path& log) {
    Reference r{in.role, in.checkpoint->path, {}};
    if (in.checkpoint->adapter.empty()) {
        r.scores = evaluate_all(c, r.path, log);
        return r;
    }
    std::error_code ec;
    fs::remove_all(scratch, ec);
    fs::create_directories(scratch.parent_path());
    edit::interpolate(scratch.string(), *in.checkpoint, *in.checkpoint, 0.0, {});
    try {
        r.scores = evaluate_all(c, scratch.string(), log);
    } catch (...) {
        fs::remove_all(scratch, ec);
        throw;
    }
    remove_checked(scratch);
    fs::remove(scratch.parent_path(), ec);  // only when empty
    return r;
}

}  // namespace

namespace {

// The candidates still to build and evaluate (one per content not yet recorded); the disk must hold
// them (all with keep, else one at a time).
std::size_t pending_candidates(const SweepConfig& c, const std::vector<Candidate>& candidates,
                               const detail::Journal& journal) {
    std::size_t pending = 0;
    std::set<std::string> contents;
    for (const auto& cand : candidates)
        if (!cand.same_as && !journal.content(cand.content) && contents.insert(cand.content).second)
            ++pending;
    if (c.candidate_bytes > 0) {
        const std::uint64_t building = c.keep ? pending : std::min<std::size_t>(pending, 1);
        edit::check_free_space(c.out_dir, building * c.candidate_bytes,
                               fmt::format("{} candidate checkpoint{}", building, building == 1 ? "" : "s"));
    }
    return pending;
}

// Every input is checked before the first evaluation: the first candidate to evaluate is built now
// (an edit checks its inputs as it builds: shapes, dtypes, non-finite weights), so a mismatch stops
// the sweep before any evaluation of the references, which can take hours with a real benchmark.
// When every candidate left takes a reference's scores (an interpolation at ω = 0 and 1 only), one of
// them is built all the same, as the check, and removed. Returns the candidate built and kept, if any.
const Candidate* build_first(const std::vector<Candidate>& candidates, const detail::Journal& journal,
                             const fs::path& work) {
    const Candidate* prebuilt = nullptr;
    const Candidate* check_only = nullptr;
    for (const auto& cand : candidates) {
        if (journal.content(cand.content)) continue;
        if (cand.same_as) {
            if (!check_only) check_only = &cand;
            continue;
        }
        prebuilt = &cand;
        break;
    }
    const Candidate* first = prebuilt ? prebuilt : check_only;
    if (!first) return nullptr;
    std::error_code ec;
    fs::remove_all(work / first->label, ec);  // a candidate left by an interrupted run
    fs::create_directories(work);
    try {
        first->build((work / first->label).string());
    } catch (...) {
        fs::remove_all(work / first->label, ec);
        throw;
    }
    if (!prebuilt) {
        remove_checked(work / first->label);
        fs::remove(work, ec);  // only when empty
    }
    return prebuilt;
}

// The scores of a candidate that equals reference `role` byte for byte.
const Scores& reference_scores(const SweepRun& run, RefRole role) {
    const auto ref = std::find_if(run.references.begin(), run.references.end(),
                                  [&](const Reference& x) { return x.role == role; });
    if (ref == run.references.end())
        throw std::logic_error(
            fmt::format("sweep: a candidate is the same as reference '{}', which the sweep does not evaluate",
                        role_name(role)));
    return ref->scores;
}

// Builds (unless `prebuilt`), evaluates and removes (unless keep) one candidate.
Scores evaluate_candidate(const SweepConfig& c, const Candidate& cand, bool prebuilt, const fs::path& work,
                          const fs::path& logs) {
    const fs::path dir = work / cand.label;
    std::error_code ec;
    if (!prebuilt) {
        fs::remove_all(dir, ec);  // a candidate left by an interrupted run
        fs::create_directories(work);
        cand.build(dir.string());
    }
    Scores scores;
    try {
        scores = evaluate_all(c, dir.string(), logs / (cand.label + ".log"));
    } catch (...) {
        if (!c.keep) fs::remove_all(dir, ec);
        throw;
    }
    if (!c.keep) remove_checked(dir);
    return scores;
}

}  // namespace

SweepRun run_candidates(const SweepConfig& c, const std::vector<ReferenceInput>& references,
                        const std::vector<Candidate>& candidates) {
    if (c.eval.empty() && (c.select_eval.empty() || c.report_eval.empty()))
        throw InputError("sweep: give --eval, or both --select-eval and --report-eval");
    if (static_cast<std::int64_t>(candidates.size()) > c.max_candidates)
        edit::throw_too_many_candidates("sweep", static_cast<double>(candidates.size()), c.max_candidates);
    const fs::path out(c.out_dir), logs = out / "logs";
    fs::create_directories(logs);
    detail::Journal journal((out / "sweep_state.jsonl").string(), c.fingerprint);
    const std::size_t pending = pending_candidates(c, candidates, journal);
    std::size_t pending_references = 0;
    for (const auto& ref : references) pending_references += journal.reference(ref.role) ? 0 : 1;
    Progress progress(pending + pending_references, c.quiet, c.progress);

    const fs::path work = out / (c.keep ? "candidates" : ".candidates");
    const Candidate* prebuilt = build_first(candidates, journal, work);
    // Removed if the references' evaluation fails: no candidate is left behind.
    std::optional<fs::path> prebuilt_dir;
    if (prebuilt && !c.keep) prebuilt_dir = work / prebuilt->label;
    struct RemoveOnFailure {
        std::optional<fs::path>& dir;
        ~RemoveOnFailure() {
            std::error_code ec;
            if (dir) fs::remove_all(*dir, ec);
        }
    } remove_on_failure{prebuilt_dir};

    SweepRun run;
    for (const auto& ref : references) {
        throw_if_cancelled();
        if (const auto* s = journal.reference(ref.role)) {
            run.references.push_back({ref.role, ref.checkpoint->path, *s});
            continue;
        }
        const auto start = Clock::now();
        const std::string role(role_name(ref.role));
        auto r =
            evaluate_reference(c, ref, out / ".references" / role, logs / ("reference-" + role + ".log"));
        journal.add(r);
        progress.evaluated("reference " + role, r.scores, seconds_since(start));
        run.references.push_back(std::move(r));
    }

    prebuilt_dir.reset();  // the loop below owns the prebuilt candidate now
    std::size_t evaluated = 0, reused = 0, unedited = 0;
    for (const auto& cand : candidates) {
        Record r;
        r.order = cand.order, r.seed = cand.seed, r.x = cand.x, r.content = cand.content,
        r.columns = cand.columns;
        if (cand.same_as) {
            r.scores = reference_scores(run, *cand.same_as);
            ++unedited;
        } else if (const auto* s = journal.content(cand.content)) {
            r.scores = *s;
            ++reused;
        } else {
            throw_if_cancelled();  // between candidates: a resumed sweep starts from here
            const auto start = Clock::now();
            r.scores = evaluate_candidate(c, cand, prebuilt == &cand, work, logs);
            if (prebuilt == &cand) prebuilt = nullptr;
            ++evaluated;
            progress.evaluated(
                fmt::format("{} seed {} x={}", order_name(cand.order), cand.seed, format_value(cand.x)),
                r.scores, seconds_since(start));
        }
        journal.add(r);
        run.records.push_back(std::move(r));
    }
    std::error_code ec;
    if (!c.keep) fs::remove(work, ec);  // only when empty
    if (c.quiet < 2)
        run.lines.push_back(fmt::format(
            "sweep: {} candidates evaluated, {} reused{}; evaluator output in {}", evaluated, reused,
            unedited ? fmt::format(", {} equal to a reference (its scores)", unedited) : std::string(),
            logs.string()));
    return run;
}

}  // namespace diffract::sweep
