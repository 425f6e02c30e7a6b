#include "diffract/watch/watch.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "diffract/analysis/custom_fields.hpp"
#include "diffract/analysis/fit_status.hpp"
#include "diffract/analysis/option_values.hpp"
#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/distributed.hpp"
#include "diffract/run/result_directory.hpp"
#include "diffract/run/tables.hpp"
#include "diffract/watch/run_directory.hpp"

namespace diffract::watch {
namespace {

// A one-shot watch waits this many settle periods, at most, for a checkpoint still being written.
constexpr double kOneShotSettlePeriods = 5;
// Alerts printed per checkpoint; the rest are counted (alerts.csv keeps them all).
constexpr std::size_t kAlertsSaidPerStep = 5;

// What the watch knows of one checkpoint (by path).
// A checkpoint's rows in the watch's tables (with its step) and what the trends and alerts observe of
// it, built once when it is analysed: writing the tables again only concatenates them.
struct StepRows {
    Table metrics, aggregates, compare, heads;
    std::vector<Observation> observations;
};

struct Entry {
    FoundCheckpoint found;
    CheckpointStatus status = CheckpointStatus::none;
    std::string note;
    bool done = false;
    // The files as they were when the rows were read: a step's rows are its current bytes' only while
    // its files still look so (found.signature is the latest look, which may not be read yet).
    std::optional<FileSignature> analysed;
    std::optional<FileSignature> failed;  // the files as they were when reading them failed
    std::optional<run::AnalyzeResult> analysis;
    std::optional<run::CompareResult> comparison;
    std::optional<StepRows> rows;
};

void check_options(const WatchOptions& o) {
    if (o.run.out.empty()) throw InputError("watch: --out is required");
    if (o.every < 1) throw InputError(fmt::format("--every {}: must be a positive number of steps", o.every));
    if (o.until_step && *o.until_step < 0) throw InputError("--until-step: must not be negative");
    if (o.delta_only && o.base.empty())
        throw InputError("--delta-only: compares with --base, which is not given");
    if (!(o.poll_seconds > 0) || !std::isfinite(o.poll_seconds))
        throw InputError("--poll: must be a positive number of seconds");
    if (!(o.settle_seconds >= 0) || !std::isfinite(o.settle_seconds))
        throw InputError("--settle: must be a non-negative number of seconds");
    const auto& t = o.thresholds;
    if (!(t.alpha_low < t.alpha_high))
        throw InputError(
            fmt::format("--alpha-low {:g} must be below --alpha-high {:g}", t.alpha_low, t.alpha_high));
    for (const auto& [name, v] : {std::pair{"--alpha-jump", t.alpha_jump},
                                  {"--stable-rank-jump", t.stable_rank_jump},
                                  {"--head-share", t.head_share}})
        if (!(v > 0) || !std::isfinite(v))
            throw InputError(fmt::format("{} {:g}: must be positive", name, v));
}

// Sleeps `seconds`, waking early for a cancellation (which it throws).
void sleep_for(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
        throw_if_cancelled();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw_if_cancelled();
}

formats::Checkpoint open_found(const FoundCheckpoint& c, const std::string& base) {
    auto ck = formats::open_checkpoint(c.adapter && !base.empty() ? base + "+" + c.path : c.path);
    ck.name = c.name;
    return ck;
}

// The run's checkpoints must hold the same tensors: trends follow a unit across steps.
using Architecture = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;
Architecture architecture_of(const formats::Checkpoint& ck) {
    Architecture a;
    for (const auto& t : ck.tensors) a.emplace_back(t.name, t.shape);
    std::sort(a.begin(), a.end());
    return a;
}

std::string shape_text(const std::vector<std::int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

void check_architecture(const Architecture& first, const std::string& first_name, const Architecture& now,
                        const formats::Checkpoint& ck) {
    if (first == now) return;
    std::map<std::string, std::vector<std::int64_t>> a(first.begin(), first.end()), b(now.begin(), now.end());
    std::string what;
    for (const auto& [name, shape] : b) {
        const auto it = a.find(name);
        if (it == a.end())
            what = fmt::format("tensor {} is not in {}", name, first_name);
        else if (it->second != shape)
            what = fmt::format("tensor {} is {} there, {} here", name, shape_text(it->second),
                               shape_text(shape));
        if (!what.empty()) break;
    }
    if (what.empty())
        for (const auto& [name, shape] : a)
            if (!b.count(name)) {
                what = fmt::format("tensor {} of {} is missing", name, first_name);
                break;
            }
    throw InputError(
        fmt::format("{}: not the architecture of {} ({}): a run's checkpoints must share their "
                    "tensors",
                    ck.path, first_name, what));
}

// How many checkpoints one analyze (and compare) job takes: enough that a job's setup is paid rarely over
// a long run, few enough that the tables follow a first look over many checkpoints.
constexpr std::size_t kCheckpointsPerJob = 64;

// Which of a job's checkpoints a warning line is about: the first whose files it names, else the first.
std::size_t owner(const std::string& warning, const std::vector<formats::Checkpoint>& models) {
    for (std::size_t i = 0; i < models.size(); ++i)
        if (warning.find(models[i].path + "/") != std::string::npos ||
            warning.find(models[i].path + ":") != std::string::npos)
            return i;
    return 0;
}

// The elements of `all` that belong to the model called `name`.
template <typename T, typename Of>
std::vector<T> of_model(const std::vector<T>& all, const std::string& name, Of model_of) {
    std::vector<T> out;
    for (const auto& x : all)
        if (model_of(x) == name) out.push_back(x);
    return out;
}

// One checkpoint's share of a job over several (its `index` among the job's models): its rows, its
// counts, and the warnings that name it (those naming none go with the first).
template <typename Result>
void share_counts_and_warnings(Result& part, const Result& all,
                               const std::vector<formats::Checkpoint>& models, std::size_t index) {
    part.per_model = {all.per_model.at(index)};
    part.computed = part.per_model[0].computed, part.reused = part.per_model[0].reused;
    for (const auto& w : all.warnings)
        if (owner(w, models) == index) part.warnings.push_back(w);
}

run::AnalyzeResult analysis_part(const run::AnalyzeResult& all,
                                 const std::vector<formats::Checkpoint>& models, std::size_t index) {
    const auto& name = models[index].name;
    run::AnalyzeResult p;
    p.fields = all.fields, p.convention = all.convention;
    p.rows = of_model(all.rows, name, [](const auto& r) { return r.model; });
    p.aggregates = of_model(all.aggregates, name, [](const auto& g) { return g.model; });
    share_counts_and_warnings(p, all, models, index);
    return p;
}

run::CompareResult comparison_part(const run::CompareResult& all,
                                   const std::vector<formats::Checkpoint>& models, std::size_t index) {
    const auto& name = models[index].name;
    run::CompareResult p;
    p.ranking = all.ranking, p.allow_partial = all.allow_partial;
    p.rows = of_model(all.rows, name, [](const auto& r) { return r.model; });
    p.heads = of_model(all.heads, name, [](const auto& h) { return h.model; });
    p.skipped = of_model(all.skipped, name, [](const auto& k) { return k.model; });
    for (const auto& f : all.findings)
        if (f.find(name) != std::string::npos) p.findings.push_back(f);
    share_counts_and_warnings(p, all, models, index);
    return p;
}

// Appends the rows of `part` (a table with the same columns, or none) to `all`.
void append_rows(Table& all, const Table& part) {
    if (part.columns.empty()) return;
    if (all.columns.empty()) all.columns = part.columns;
    if (all.columns != part.columns) throw std::logic_error("watch: a checkpoint's table has other columns");
    all.rows.insert(all.rows.end(), part.rows.begin(), part.rows.end());
}

// Appends `t`'s rows to `all` with `step` in a first column.
void append_with_step(Table& all, const Table& t, std::int64_t step) {
    std::vector<std::string> columns{"step"};
    columns.insert(columns.end(), t.columns.begin(), t.columns.end());
    if (all.columns.empty()) all.columns = columns;
    if (all.columns != columns) throw std::logic_error("watch: a checkpoint's table has other columns");
    for (const auto& r : t.rows) {
        auto& row = all.rows.emplace_back();
        row.push_back(Cell{step});
        row.insert(row.end(), r.begin(), r.end());
    }
}

template <typename Row>
void observe_rows(const std::vector<Row>& rows, Source source, std::int64_t step,
                  std::vector<Observation>& out) {
    for (const auto& r : rows) {
        Observation o;
        o.source = source, o.tensor = r.tensor, o.layer = r.layer, o.role = r.role;
        o.head = r.head, o.step = step;
        for (const auto& [f, v] : r.values)
            if (!analysis::is_status_field(f)) o.values[f] = v;
        out.push_back(std::move(o));
    }
}

void observe_heads(const std::vector<analysis::HeadRow>& heads, std::int64_t step,
                   std::vector<Observation>& out) {
    for (const auto& h : heads) {
        Observation o;
        o.source = Source::heads, o.layer = h.layer, o.head = h.head, o.step = step;
        o.values = {{"update_norm", h.ranked.update_norm},
                    {"relative_update", h.domain.relative_update()},
                    {"importance", h.ranked.importance},
                    {"agreement", h.domain.agreement},
                    {"update_z", h.update_z}};
        out.push_back(std::move(o));
    }
}

class Watcher {
public:
    explicit Watcher(const WatchOptions& o) : o_(o) {
        check_options(o);
        // Each rank would look at the directory at its own moments and disagree on what to analyse.
        if (run::distributed().size > 1)
            throw InputError(
                fmt::format("watch runs as one process (started as {} MPI ranks): run it without "
                            "mpirun, and its checkpoints' analyses use every core of the machine",
                            run::distributed().size));
        if (!o.base.empty()) base_ = formats::open_checkpoint(o.base);
        check_out_of_inputs();
    }

    WatchResult run() {
        try {
            loop();
        } catch (const Cancelled&) {
            write();  // every finished checkpoint's rows, as one directory
            throw;
        }
        if (std::none_of(entries_.begin(), entries_.end(), [](const auto& e) { return e.second.done; }))
            throw InputError(nothing_read());
        // Every analysed checkpoint wrote the tables; only a status changed since needs them again.
        if (changed_) write();
        // A one-shot watch whose every checkpoint ends skipped (one read, then rewritten and not read
        // again) read nothing current: exit 2 as when none could be read, the tables written, so that CI
        // can tell (docs/watch.md, "Exit status").
        if (!o_.follow && std::none_of(entries_.begin(), entries_.end(), [](const auto& e) {
                return e.second.status == CheckpointStatus::analysed ||
                       e.second.status == CheckpointStatus::reused;
            }))
            throw InputError(nothing_read());
        return result_;
    }

private:
    void say(const std::string& line) const {
        if (o_.notice) o_.notice(line);
    }
    void warn(const std::string& line) const {
        if (o_.warning)
            o_.warning(line);
        else
            say(line);
    }

    // A checkpoint's status changes: the tables are written again at the end of the pass.
    void set_status(Entry& e, CheckpointStatus status, std::string note) {
        if (e.status == status && e.note == note) return;
        e.status = status, e.note = std::move(note);
        changed_ = true;
    }

    // The result directory is rewritten as a whole: never the run directory or one holding it, never in
    // the base or in a checkpoint (a directory inside the run beside its checkpoints is fine).
    void check_out_of_inputs() const {
        check_output_kind(o_.run.out, OutputKind::directory);
        if (base_) check_output_path(o_.run.out, base_->input_paths());
        const auto out = physical_path(o_.run.out), run = physical_path(o_.run_dir);
        if (std::mismatch(out.begin(), out.end(), run.begin(), run.end()).first == out.end())
            throw InputError(fmt::format("--out {}: is or holds the run directory {}, which watch reads",
                                         o_.run.out, o_.run_dir));
        // Beside the checkpoints, a name that carries a step is one the next look would take for a
        // checkpoint (and then refuse as an input): refused now, before anything is written.
        if (out.parent_path() == run && step_in_name(out.filename().string()))
            throw InputError(
                fmt::format("--out {}: named like a checkpoint of the run {} (its name carries a "
                            "step), which watch would read as one: give it another name",
                            o_.run.out, o_.run_dir));
    }

    bool wanted(const FoundCheckpoint& c) const {
        return c.step % o_.every == 0 && (!o_.until_step || c.step <= *o_.until_step);
    }

    void loop() {
        double waited = 0;
        for (;;) {
            std::vector<FoundCheckpoint> found;
            for (auto& c : find_checkpoints(o_.run_dir, o_.settle_seconds)) {
                if (!c.ignored.empty()) {
                    if (warned_.insert(c.path).second)
                        warn(fmt::format("watch: warning: {}: {}", c.path, c.ignored));
                    continue;
                }
                try {
                    check_output_path(o_.run.out, {c.path});
                } catch (const InputError&) {
                    // A link elsewhere that holds --out is no checkpoint of this run either: left out
                    // with a warning. A real entry of the run around --out stays an error.
                    if (std::error_code ec; !std::filesystem::is_symlink(c.path, ec)) throw;
                    if (warned_.insert(c.path).second)
                        warn(
                            fmt::format("watch: warning: {}: links to a directory holding --out {}: not a "
                                        "checkpoint; left out",
                                        c.path, o_.run.out));
                    continue;
                }
                if (wanted(c)) found.push_back(std::move(c));
            }
            check_steps(found);
            note_deleted(found);
            double wait = 0;
            std::vector<Ready> ready;
            for (const auto& c : found) wait = std::max(wait, visit(c, ready));
            analyse_all(ready);
            if (changed_ && (o_.follow || wait <= 0)) write();
            if (o_.until_step && reached_until()) return;
            if (!o_.follow) {
                if (wait <= 0 || waited >= kOneShotSettlePeriods * std::max(o_.settle_seconds, 0.1)) {
                    for (auto& [path, e] : entries_)
                        if (!e.done && e.status == CheckpointStatus::none)
                            set_status(e, CheckpointStatus::skipped, "still being written");
                    return;
                }
                sleep_for(wait);
                waited += wait;
                continue;
            }
            sleep_for(wait > 0 ? std::min(wait, o_.poll_seconds) : o_.poll_seconds);
        }
    }

    bool reached_until() const {
        return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) {
            return e.second.done && e.second.found.step >= *o_.until_step;
        });
    }

    // Two checkpoints of one step would make every table ambiguous.
    void check_steps(const std::vector<FoundCheckpoint>& found) const {
        std::map<std::int64_t, const FoundCheckpoint*> seen;
        for (const auto& c : found) {
            const auto [it, fresh] = seen.emplace(c.step, &c);
            if (!fresh)
                throw InputError(
                    fmt::format("{}: step {} is also the step of {}: a run's checkpoints need distinct "
                                "steps (watch one run directory at a time)",
                                c.path, c.step, it->second->path));
        }
        for (const auto& [path, e] : entries_)
            if (e.done && e.status != CheckpointStatus::deleted && seen.count(e.found.step) &&
                seen[e.found.step]->path != path)
                throw InputError(fmt::format("{}: step {} is also the step of {}, analysed before",
                                             seen[e.found.step]->path, e.found.step, path));
    }

    // save_total_limit deletes old checkpoints: their rows stay.
    void note_deleted(const std::vector<FoundCheckpoint>& found) {
        std::set<std::string> present;
        for (const auto& c : found) present.insert(c.path);
        for (auto& [path, e] : entries_)
            if (!present.count(path) && e.status != CheckpointStatus::deleted &&
                (e.done || e.status != CheckpointStatus::none)) {
                if (e.done)
                    say(fmt::format("watch: step {} ({}) was deleted; its rows stay", e.found.step,
                                    e.found.name));
                set_status(e, CheckpointStatus::deleted, "");
            }
    }

    // A checkpoint ready to be analysed, opened.
    struct Ready {
        Entry* entry;
        formats::Checkpoint checkpoint;
        FileSignature signature;  // the files as they were when opened
    };

    // Opens `c` when it is ready (into `ready`); returns how long to wait for it when it is still
    // being written.
    double visit(const FoundCheckpoint& c, std::vector<Ready>& ready) {
        auto& e = entries_[c.path];
        if (e.done && e.analysed == c.signature && e.status != CheckpointStatus::deleted) return 0;
        // Said once per change: a re-save still settling is looked at again on every pass until read.
        if (e.done && e.status != CheckpointStatus::deleted && e.found.signature != c.signature)
            say(fmt::format("watch: step {} ({}) was rewritten; reading it again", c.step, c.name));
        e.found = c;
        if (!c.not_ready.empty()) {
            set_status(e, CheckpointStatus::skipped, c.not_ready);
            return 0;
        }
        const double age = seconds_since_change(c.signature);
        if (age < o_.settle_seconds) {
            set_status(e, CheckpointStatus::skipped, "being written");
            return o_.settle_seconds - age;
        }
        if (e.failed && *e.failed == c.signature) return 0;  // unreadable as it stands: wait for a change
        try {
            ready.push_back({&e, open_found(c, o_.base), c.signature});
        } catch (const InputError& err) {
            e.failed = c.signature;
            set_status(e, CheckpointStatus::skipped, one_line(err.what()));
            say(fmt::format("watch: step {} ({}) skipped: {}; it is read again once its files change", c.step,
                            c.name, e.note));
            return 0;
        }
        e.failed.reset();
        return 0;
    }

    // Every checkpoint ready in this pass, checked against the run's architecture before any is analysed.
    void analyse_all(std::vector<Ready>& ready) {
        for (const auto& r : ready) {
            const auto arch = architecture_of(r.checkpoint);
            if (first_name_.empty()) first_name_ = r.checkpoint.path, first_arch_ = arch;
            check_architecture(first_arch_, first_name_, arch, r.checkpoint);
        }
        for (std::size_t first = 0; first < ready.size(); first += kCheckpointsPerJob)
            analyse_batch(ready, first, std::min(ready.size(), first + kCheckpointsPerJob));
    }

    // The checkpoints ready[first, end) as one analyze (and compare) job: a job's setup and store look-up
    // is paid once for them all, and its results are split back per checkpoint.
    void analyse_batch(std::vector<Ready>& ready, std::size_t first, std::size_t end) {
        run::AnalyzeOptions a;
        a.metrics = o_.metrics, a.heads = o_.heads, a.kernel = o_.kernel, a.run = o_.run;
        for (std::size_t k = first; k < end; ++k) a.models.push_back(std::move(ready[k].checkpoint));
        std::optional<run::CompareOptions> c;
        if (base_) {
            c.emplace();
            static_cast<analysis::CompareSettings&>(*c) = {};
            c->precision = o_.kernel.precision, c->route = o_.kernel.route, c->delta_only = o_.delta_only;
            c->base = *base_, c->models = a.models, c->heads = o_.heads, c->ranking = o_.ranking,
            c->run = o_.run;
            c->suggest_allow_partial = false;
        }
        const auto analysis = run::analyze(a);
        std::optional<run::CompareResult> comparison;
        if (c) comparison = run::compare(*c);
        for (std::size_t k = first; k < end; ++k) {
            auto& e = *ready[k].entry;
            e.analysis = analysis_part(analysis, a.models, k - first);
            if (comparison) e.comparison = comparison_part(*comparison, a.models, k - first);
            finish(e);
            e.analysed = std::move(ready[k].signature);
        }
    }

    void finish(Entry& e) {
        e.done = true;
        e.rows = step_rows(e);
        const std::size_t computed = e.analysis->computed + (e.comparison ? e.comparison->computed : 0);
        const std::size_t reused = e.analysis->reused + (e.comparison ? e.comparison->reused : 0);
        e.status = computed == 0 ? CheckpointStatus::reused : CheckpointStatus::analysed;
        e.note.clear();
        for (const auto* warnings : {&e.analysis->warnings, e.comparison ? &e.comparison->warnings : nullptr})
            if (warnings)
                for (const auto& w : *warnings) {
                    warn("watch: warning: " + w);
                    result_.warnings.push_back(w);
                }
        say(fmt::format("watch: step {} ({}): {}", e.found.step, e.found.name,
                        computed == 0
                            ? fmt::format("all {} results reused from the store, nothing computed", reused)
                            : fmt::format("{} computed, {} reused", computed, reused)));
        write_if_due();
    }

    StepRows step_rows(const Entry& e) const {
        StepRows s;
        const auto step = e.found.step;
        append_with_step(s.metrics, run::metrics_table(*e.analysis), step);
        append_with_step(s.aggregates, run::aggregates_table(*e.analysis), step);
        observe_rows(e.analysis->rows, Source::metrics, step, s.observations);
        if (e.comparison) {
            append_with_step(s.compare, run::compare_table(*e.comparison), step);
            append_with_step(s.heads, run::heads_table(*e.comparison), step);
            observe_rows(e.comparison->rows, Source::compare, step, s.observations);
            observe_heads(e.comparison->heads, step, s.observations);
        }
        return s;
    }

    // The tables after an analysed checkpoint: written when the last writing took under a fifth of the
    // time since (and always at the end of a pass), so that rewriting every table over every step stays
    // a bounded share of the run however many checkpoints it has (a run of a thousand checkpoints all
    // reused from the store would otherwise spend its time rewriting them).
    void write_if_due() {
        changed_ = true;
        if (last_write_end_ && std::chrono::steady_clock::now() - *last_write_end_ < 4 * last_write_cost_)
            return;
        write();
    }

    // The tables from every analysed checkpoint, trends and alerts; new alerts are said.
    void rebuild() {
        std::vector<const Entry*> order;
        for (const auto& [path, e] : entries_)
            if (e.done || e.status != CheckpointStatus::none) order.push_back(&e);
        std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
            return a->found.step != b->found.step ? a->found.step < b->found.step
                                                  : a->found.name < b->found.name;
        });
        WatchResult r;
        r.warnings = result_.warnings;
        std::vector<Observation> observations;
        for (const auto* e : order) {
            WatchedCheckpoint w;
            w.step = e->found.step, w.name = e->found.name, w.path = e->found.path,
            w.adapter = e->found.adapter;
            w.status = e->status, w.note = e->note;
            if (e->done) {
                w.computed = e->analysis->computed + (e->comparison ? e->comparison->computed : 0);
                w.reused = e->analysis->reused + (e->comparison ? e->comparison->reused : 0);
                append_rows(r.metrics, e->rows->metrics);
                append_rows(r.aggregates, e->rows->aggregates);
                append_rows(r.compare, e->rows->compare);
                append_rows(r.heads, e->rows->heads);
                observations.insert(observations.end(), e->rows->observations.begin(),
                                    e->rows->observations.end());
            }
            r.checkpoints.push_back(std::move(w));
        }
        r.trends = trends(observations, o_.thresholds);
        r.alerts = alerts(observations, o_.thresholds);
        std::map<std::int64_t, std::vector<const Alert*>> fresh;
        for (const auto& a : r.alerts) {
            const auto key = fmt::format("{}|{}|{}|{}|{}", a.step, alert_kind_name(a.kind), a.tensor,
                                         a.head.value_or(-1), a.field);
            if (said_alerts_.insert(key).second) fresh[a.step].push_back(&a);
        }
        for (const auto& [step, list] : fresh) {
            for (std::size_t i = 0; i < std::min(list.size(), kAlertsSaidPerStep); ++i)
                say(fmt::format("watch: step {}: alert: {}", step, list[i]->message));
            if (list.size() > kAlertsSaidPerStep)
                say(fmt::format("watch: step {}: {} more alerts in {}/alerts.csv", step,
                                list.size() - kAlertsSaidPerStep, o_.run.out));
        }
        result_ = std::move(r);
    }

    void write() {
        const auto start = std::chrono::steady_clock::now();
        changed_ = false;
        rebuild();
        std::map<std::string, std::string> files{
            {"checkpoints.csv", to_csv(checkpoints_table(result_.checkpoints))},
            {"trends.csv", to_csv(trends_table(result_.trends))},
            {"alerts.csv", to_csv(alerts_table(result_.alerts))},
            {"watch.json", settings_json()}};
        if (!result_.metrics.columns.empty()) {
            files["metrics.csv"] = to_csv(result_.metrics);
            files["aggregates.csv"] = to_csv(result_.aggregates);
        }
        if (!result_.compare.columns.empty()) {
            files["compare.csv"] = to_csv(result_.compare);
            files["heads.csv"] = to_csv(result_.heads);
        }
        run::write_result_directory(o_.run.out, files);
        last_write_end_ = std::chrono::steady_clock::now();
        last_write_cost_ = *last_write_end_ - start;
    }

    std::string settings_json() const {
        const auto& t = o_.thresholds;
        nlohmann::json j = {
            {"run_dir", o_.run_dir},
            {"base", o_.base},
            {"every", o_.every},
            {"delta_only", o_.delta_only},
            {"precision", std::string(name_of(analysis::kPrecisionNames, o_.kernel.precision))},
            {"thresholds",
             {{"alpha_low", t.alpha_low},
              {"alpha_high", t.alpha_high},
              {"alpha_jump", t.alpha_jump},
              {"stable_rank_jump", t.stable_rank_jump},
              {"head_share", t.head_share}}}};
        return j.dump(2) + "\n";
    }

    std::string nothing_read() const {
        std::vector<std::string> why;
        for (const auto& [path, e] : entries_)
            if (!e.note.empty()) why.push_back(fmt::format("{}: {}", e.found.name, e.note));
        if (!why.empty())
            return fmt::format("{}: no checkpoint could be read ({})", o_.run_dir, fmt::join(why, "; "));
        if (is_model_directory(o_.run_dir))
            return fmt::format(
                "{}: this is one checkpoint, not a run of them: watch takes the directory holding "
                "checkpoint-<step>/ directories (or step-named models)",
                o_.run_dir);
        return fmt::format(
            "{}: no checkpoints found (watch looks for checkpoint-<step>/ directories, model "
            "directories or .safetensors/.gguf/.bin files whose name carries a step{})",
            o_.run_dir, o_.every > 1 || o_.until_step ? ", within --every and --until-step" : "");
    }

    const WatchOptions& o_;
    std::optional<formats::Checkpoint> base_;
    std::map<std::string, Entry> entries_;
    std::string first_name_;
    Architecture first_arch_;
    std::set<std::string> said_alerts_;
    std::set<std::string> warned_;  // entries left out, each warned about once
    bool changed_ = false;          // a status changed since the tables were written
    std::optional<std::chrono::steady_clock::time_point> last_write_end_;
    std::chrono::steady_clock::duration last_write_cost_{};
    WatchResult result_;
};

}  // namespace

WatchResult watch(const WatchOptions& options) { return Watcher(options).run(); }

WatchOptions parse_watch_options(const WatchOptionText& text) {
    WatchOptions o;
    o.run_dir = text.run_dir;
    o.base = text.base;
    o.metrics = analysis::resolve_metrics_with_custom(text.metrics);
    o.heads = text.heads;
    o.kernel = analysis::parse_kernel_options(text.kernel);
    o.delta_only = text.delta_only;
    o.follow = text.follow;
    o.every = text.every;
    o.until_step = text.until_step;
    o.poll_seconds = text.poll;
    o.settle_seconds = text.settle;
    o.thresholds = text.thresholds;
    o.run = run::parse_run_options(text.run);
    o.run.out = text.out;
    check_options(o);
    return o;
}

std::string_view checkpoint_status_name(CheckpointStatus status) {
    return name_of(kCheckpointStatusNames, status);
}

Table checkpoints_table(const std::vector<WatchedCheckpoint>& checkpoints) {
    return make_table<WatchedCheckpoint>(
        {{"step", [](const WatchedCheckpoint& c) -> Cell { return c.step; }},
         {"name", [](const WatchedCheckpoint& c) -> Cell { return c.name; }},
         {"path", [](const WatchedCheckpoint& c) -> Cell { return c.path; }},
         {"adapter", [](const WatchedCheckpoint& c) -> Cell { return std::int64_t{c.adapter ? 1 : 0}; }},
         {"status",
          [](const WatchedCheckpoint& c) -> Cell { return std::string(checkpoint_status_name(c.status)); }},
         {"note", [](const WatchedCheckpoint& c) -> Cell { return c.note; }},
         {"computed",
          [](const WatchedCheckpoint& c) -> Cell { return static_cast<std::uint64_t>(c.computed); }},
         {"reused", [](const WatchedCheckpoint& c) -> Cell { return static_cast<std::uint64_t>(c.reused); }}},
        checkpoints);
}

}  // namespace diffract::watch
