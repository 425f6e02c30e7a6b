// A sweep's outputs: curve.csv (a row per candidate) and summary.json (areas under the curves, the
// selection, the reference points).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "diffract/core/atomic_file.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/core/random.hpp"
#include "diffract/sweep/score_direction.hpp"
#include "diffract/sweep/sweep.hpp"

namespace fs = std::filesystem;

namespace diffract::sweep {
namespace {

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    if (!std::isfinite(s) && std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); })) {
        // Finite values whose sum overflows (scores near 1e308): summed in extended precision, so
        // the mean is finite; every other mean keeps its double arithmetic exactly.
        long double e = 0;
        for (double x : v) e += x;
        return static_cast<double>(e / static_cast<long double>(v.size()));
    }
    return v.empty() ? kNaN : s / static_cast<double>(v.size());
}

// The percentile 95 % interval of bootstrap values: sorted, at floor(0.025 (M − 1)) and ceil(0.975 (M − 1)).
std::pair<double, double> percentile_ci95(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const double last = static_cast<double>(values.size() - 1);
    return {values[static_cast<std::size_t>(std::floor(0.025 * last))],
            values[static_cast<std::size_t>(std::ceil(0.975 * last))]};
}

// The bootstrap of (ordering AUC − mean random AUC) over the random orderings: every resample of the n
// random AUCs with replacement, enumerated when n^n is at most kExactResamples (the exact bootstrap
// distribution: a brute-force computation reproduces it), else kDrawnResamples seeded draws. Returns the
// percentile 95 % interval (percentile_ci95).
constexpr std::size_t kExactResamples = 100000, kDrawnResamples = 20000;

std::pair<double, double> bootstrap_diff_ci95(double auc, const std::vector<double>& random) {
    const std::size_t n = random.size();
    std::vector<double> diffs;
    double total = 1;
    for (std::size_t i = 0; i < n && total <= kExactResamples; ++i) total *= static_cast<double>(n);
    if (total <= kExactResamples) {
        std::vector<std::size_t> pick(n, 0);
        for (bool more = true; more;) {
            double sum = 0;
            for (const auto k : pick) sum += random[k];
            diffs.push_back(auc - sum / static_cast<double>(n));
            more = false;
            for (std::size_t i = 0; i < n && !more; ++i) {
                if (++pick[i] < n)
                    more = true;
                else
                    pick[i] = 0;
            }
        }
    } else {
        std::uint64_t state = stream_seed(0, "auc-bootstrap");
        for (std::size_t b = 0; b < kDrawnResamples; ++b) {
            double sum = 0;
            for (std::size_t i = 0; i < n; ++i) sum += random[splitmix64(state) % n];
            diffs.push_back(auc - sum / static_cast<double>(n));
        }
    }
    return percentile_ci95(std::move(diffs));
}

// The two-sided rank p-value of `auc` among the random orderings' AUCs: with n of them, the chance
// that a random ordering (matched in what it rewinds) is at least as extreme, 2·min(P≥, P≤) with
// P≥ = (1 + #{r ≥ auc}) / (n + 1), capped at 1. Its smallest possible value is 2/(n + 1).
double rank_p_value(double auc, const std::vector<double>& random) {
    double ge = 1, le = 1;
    for (const double r : random) ge += r >= auc ? 1 : 0, le += r <= auc ? 1 : 0;
    const double n1 = static_cast<double>(random.size() + 1);
    return std::min(1.0, 2 * std::min(ge, le) / n1);
}

double stddev(const std::vector<double>& v) {
    if (v.size() < 2) return v.empty() ? kNaN : 0.0;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size() - 1));
}

bool has_select_report(const SweepConfig& c) { return !c.select_eval.empty() || !c.report_eval.empty(); }

}  // namespace

double trapezoid_auc(std::vector<std::pair<double, double>> p) {
    std::sort(p.begin(), p.end());
    double a = 0;
    for (std::size_t i = 1; i < p.size(); ++i)
        a += 0.5 * (p[i].first - p[i - 1].first) * (p[i].second + p[i - 1].second);
    if (!std::isfinite(a) && std::all_of(p.begin(), p.end(), [](const auto& q) {
            return std::isfinite(q.first) && std::isfinite(q.second);
        })) {
        // Finite points whose sums overflow (scores near 1e308): the same rule in extended precision.
        long double e = 0;
        for (std::size_t i = 1; i < p.size(); ++i)
            e += 0.5L * (static_cast<long double>(p[i].first) - p[i - 1].first) *
                 (static_cast<long double>(p[i].second) + p[i - 1].second);
        return static_cast<double>(e);
    }
    return a;
}

nlohmann::ordered_json references_json(const SweepConfig& c, const std::vector<Reference>& references) {
    nlohmann::ordered_json refs = nlohmann::ordered_json::object();
    for (const auto& r : references) {
        nlohmann::ordered_json j;
        j["score"] = number_json(r.scores.curve_score());
        if (has_select_report(c)) {
            j["select_score"] = number_json(r.scores.select_score);
            j["report_score"] = number_json(r.scores.report_score);
        }
        j["eval_seconds"] = number_json(r.scores.eval_seconds);
        j["path"] = r.path;
        refs[std::string(role_name(r.role))] = j;
    }
    return refs;
}

// The AUC difference's 95 % interval over evaluation chunks: when every point's evaluation printed its
// per-chunk scores (the same number of chunks everywhere), the chunks are resampled with replacement,
// the same indices for every point (the chunks are the same data for every model), each point scored
// as the mean of its resampled chunks, and (mean AUC of `order` − mean AUC of random) recomputed:
// kDrawnResamples seeded draws, percentile interval. nullopt without chunks or with chunk counts that
// differ.
using CurvePoints = std::map<std::pair<Order, std::uint64_t>, std::vector<const Record*>>;

std::optional<std::pair<double, double>> chunk_diff_ci95(const CurvePoints& points, Order order) {
    std::size_t m = 0;
    for (const auto& [key, recs] : points)
        for (const auto* r : recs) {
            if (r->scores.chunks.size() < 2 || (m && r->scores.chunks.size() != m)) return std::nullopt;
            m = r->scores.chunks.size();
        }
    std::uint64_t state = stream_seed(0, "chunk-bootstrap");
    std::vector<std::size_t> idx(m);
    std::vector<double> diffs;
    for (std::size_t b = 0; b < kDrawnResamples; ++b) {
        for (auto& i : idx) i = splitmix64(state) % m;
        std::map<Order, std::vector<double>> aucs;
        for (const auto& [key, recs] : points) {
            if (key.first != order && key.first != Order::random) continue;
            std::vector<std::pair<double, double>> xy;
            for (const auto* r : recs) {
                double sum = 0;
                for (auto i : idx) sum += r->scores.chunks[i];
                double point = sum / static_cast<double>(m);
                if (!std::isfinite(point)) {  // finite chunks near 1e308 whose sum overflows
                    long double e = 0;
                    for (auto i : idx) e += r->scores.chunks[i];
                    point = static_cast<double>(e / static_cast<long double>(m));
                }
                xy.emplace_back(r->x, point);
            }
            aucs[key.first].push_back(trapezoid_auc(xy));
        }
        diffs.push_back(mean(aucs[order]) - mean(aucs[Order::random]));
    }
    return percentile_ci95(std::move(diffs));
}

// Why chunks some evaluation printed give no interval ("" when none printed any, or when they do): the
// interval resamples the same chunks of every model, so every evaluation needs the same count, >= 2.
std::string chunks_unusable(const CurvePoints& points) {
    std::size_t lo = std::numeric_limits<std::size_t>::max(), hi = 0;
    for (const auto& [key, recs] : points)
        for (const auto* r : recs)
            lo = std::min(lo, r->scores.chunks.size()), hi = std::max(hi, r->scores.chunks.size());
    if (hi == 0) return "";
    if (lo != hi)
        return fmt::format(
            "the evaluations printed different numbers of chunks ({} to {}): no interval over "
            "chunks, which needs the same chunks for every model",
            lo, hi);
    return fmt::format("{} chunk per evaluation: no interval over chunks, which needs at least 2", hi);
}

void add_score_key(const SweepConfig& c, nlohmann::ordered_json& summary) {
    if (!c.eval.score_key.empty()) summary["score_key"] = c.eval.score_key;
    // Where the numbers are: which scores are better, as every judgment of this sweep took it.
    if (!summary.contains("direction"))
        summary["direction"] = c.lower_is_better ? nlohmann::ordered_json(direction_name(*c.lower_is_better))
                                                 : nlohmann::ordered_json(nullptr);
}

namespace {

// The statistics of a run's curves, computed before any output is written: each curve's points
// ((order, seed) in first-seen order), each ordering's AUCs and seeds, and the random orderings' mean
// and standard deviation.
struct CurveStats {
    std::vector<std::pair<Order, std::uint64_t>> curves;
    CurvePoints points;
    std::vector<Order> orders;  // first-seen order
    std::map<Order, std::vector<double>> aucs;
    std::map<Order, std::vector<std::uint64_t>> seeds;
    bool has_random = false;
    double random_mean = kNaN, random_std = kNaN;
};

CurveStats curve_stats(const SweepRun& run) {
    CurveStats st;
    for (const auto& r : run.records) {
        const auto key = std::pair(r.order, r.seed);
        if (!st.points.count(key)) st.curves.push_back(key);
        if (std::find(st.orders.begin(), st.orders.end(), r.order) == st.orders.end())
            st.orders.push_back(r.order);
        st.points[key].push_back(&r);
    }
    for (const auto& key : st.curves) {
        std::vector<std::pair<double, double>> xy;
        for (const auto* r : st.points[key]) xy.emplace_back(r->x, r->curve_score());
        st.aucs[key.first].push_back(trapezoid_auc(xy));
        st.seeds[key.first].push_back(key.second);
    }
    st.has_random = st.aucs.count(Order::random) > 0;
    if (st.has_random)
        st.random_mean = mean(st.aucs[Order::random]), st.random_std = stddev(st.aucs[Order::random]);
    return st;
}

// How sure an ordering's difference from the random orderings is: a bootstrap interval over the random
// orderings and the rank p-value, with how many orderings are behind them; and the interval over the
// evaluation's own data, where the evaluator printed per-chunk scores.
struct VersusRandom {
    std::pair<double, double> ci95;
    double p_value;
    std::size_t orderings;
    std::optional<std::pair<double, double>> chunks_ci95;
    std::string chunks_note;  // why the chunks printed give no interval ("" when none did, or they do)
};

VersusRandom versus_random(CurveStats& st, Order o) {
    const double auc = mean(st.aucs[o]);
    const auto& r = st.aucs[Order::random];
    VersusRandom v{bootstrap_diff_ci95(auc, r), rank_p_value(auc, r), r.size(), chunk_diff_ci95(st.points, o),
                   ""};
    if (!v.chunks_ci95) v.chunks_note = chunks_unusable(st.points);
    return v;
}

nlohmann::ordered_json order_json(CurveStats& st, Order o, const SweepRun& run) {
    const auto& a = st.aucs[o];
    nlohmann::ordered_json j;
    j["seeds"] = st.seeds[o];
    j["aucs"] = a;
    j["auc_mean"] = number_json(mean(a));
    j["auc_std"] = number_json(stddev(a));
    if (!st.has_random) return j;
    const double rmean = st.random_mean, rstd = st.random_std;
    j["auc_diff_vs_random"] = number_json(mean(a) - rmean);
    j["auc_ratio_vs_random"] = number_json(mean(a) / rmean);
    j["z_vs_random"] = number_json(rstd > 0 ? (mean(a) - rmean) / rstd : kNaN);
    if (o == Order::random) return j;
    const auto v = versus_random(st, o);
    j["auc_diff_ci95"] = {number_json(v.ci95.first), number_json(v.ci95.second)};
    j["p_value_vs_random"] = number_json(v.p_value);
    j["random_orderings"] = v.orderings;
    if (v.chunks_ci95) {
        j["auc_diff_ci95_chunks"] = {number_json(v.chunks_ci95->first), number_json(v.chunks_ci95->second)};
        j["chunks"] = run.records.front().scores.chunks.size();
    } else if (!v.chunks_note.empty()) {
        // Chunks printed but not the same data for every model: said, never dropped silently.
        j["auc_diff_ci95_chunks"] = nullptr;
        j["chunks_note"] = v.chunks_note;
    }
    if (2.0 / static_cast<double>(v.orderings + 1) > 0.05)
        j["note"] = fmt::format(
            "{} random orderings: the p-value cannot go below {:.3g}; --seeds 39 or more can "
            "show "
            "p < 0.05",
            v.orderings, 2.0 / static_cast<double>(v.orderings + 1));
    return j;
}

// The point of each curve of ordering `o` with the best select score, and the report score there.
struct BestPoint {
    std::uint64_t seed;
    const Record* best;
    double gain;  // its report score − the report score at x = 0 (NaN without that point)
};

std::vector<BestPoint> best_points(const SweepConfig& c, CurveStats& st, Order o) {
    std::vector<BestPoint> out;
    for (const auto& key : st.curves) {
        if (key.first != o) continue;
        const Record* best = nullptr;
        const Record* unedited = nullptr;
        for (const auto* r : st.points[key]) {
            const double x = r->scores.select_score, b = best ? best->scores.select_score : kNaN;
            if (!best || (c.lower_is_better.value_or(false) ? x < b : x > b)) best = r;
            if (r->x == 0) unedited = r;
        }
        out.push_back(
            {key.second, best, unedited ? best->scores.report_score - unedited->scores.report_score : kNaN});
    }
    return out;
}

nlohmann::ordered_json selection_json(const std::vector<BestPoint>& points) {
    nlohmann::ordered_json per;
    std::vector<double> reported, gains;
    for (const auto& p : points) {
        per["curves"].push_back({{"seed", p.seed},
                                 {"x", p.best->x},
                                 {"select_score", number_json(p.best->scores.select_score)},
                                 {"report_score", number_json(p.best->scores.report_score)},
                                 {"report_gain_vs_x0", number_json(p.gain)}});
        reported.push_back(p.best->scores.report_score);
        gains.push_back(p.gain);
    }
    per["report_mean"] = number_json(mean(reported));
    per["report_std"] = number_json(stddev(reported));
    per["report_gain_mean"] = number_json(mean(gains));
    return per;
}

}  // namespace

nlohmann::json summarize(const SweepConfig& c, Kind kind, const SweepRun& run) {
    auto st = curve_stats(run);
    nlohmann::ordered_json s;
    s["sweep"] = std::string(kind_name(kind));
    if (run.unit) s["unit"] = std::string(name_of(edit::kRewindUnitNames, *run.unit));
    s["score"] = c.eval.empty() ? "select" : "eval";
    add_score_key(c, s);
    // The unedited model's score, where the report looks for it (its "unedited" line).
    for (const auto& r : run.references)
        if (r.role == RefRole::model) s["baseline"] = number_json(r.scores.curve_score());
    s["references"] = references_json(c, run.references);
    if (st.has_random)
        s["random"] = {{"auc_mean", number_json(st.random_mean)},
                       {"auc_std", number_json(st.random_std)},
                       {"seeds", st.aucs[Order::random].size()}};
    for (const auto o : st.orders) s["orders"][std::string(order_name(o))] = order_json(st, o, run);
    if (!c.select_eval.empty() && !c.report_eval.empty())
        for (const auto o : st.orders)
            s["selection"][std::string(order_name(o))] = selection_json(best_points(c, st, o));
    return s;
}

Table curve_table(const SweepConfig& c, const SweepRun& run) {
    std::vector<Column<Record>> columns{
        {"order", [](const Record& r) -> Cell { return std::string(order_name(r.order)); }},
        {"seed", [](const Record& r) -> Cell { return r.seed; }},
        {"x", [](const Record& r) -> Cell { return r.x; }}};
    if (!run.records.empty())
        for (std::size_t i = 0; i < run.records.front().columns.size(); ++i)
            columns.push_back({run.records.front().columns[i].first, [i](const Record& r) -> Cell {
                                   return i < r.columns.size() ? Cell(r.columns[i].second) : Cell();
                               }});
    columns.push_back({"score", [](const Record& r) -> Cell { return r.curve_score(); }});
    if (has_select_report(c)) {
        columns.push_back({"select_score", [](const Record& r) -> Cell { return r.scores.select_score; }});
        columns.push_back({"report_score", [](const Record& r) -> Cell { return r.scores.report_score; }});
    }
    columns.push_back({"eval_seconds", [](const Record& r) -> Cell { return r.scores.eval_seconds; }});
    return make_table(columns, run.records);
}

SweepOutputs write_outputs(const SweepConfig& c, Kind kind, const SweepRun& run) {
    SweepOutputs out{curve_table(c, run), json_text(summarize(c, kind, run), 2) + "\n"};
    const fs::path dir(c.out_dir);
    write_file_atomically((dir / "curve.csv").string(), to_csv(out.table));
    write_file_atomically((dir / "summary.json").string(), out.summary);
    out.lines = run.lines;
    if (c.quiet < 2)
        out.lines.push_back(fmt::format("sweep {}: {} points -> {}/curve.csv, {}/summary.json",
                                        kind_name(kind), run.records.size(), c.out_dir, c.out_dir));
    return out;
}

}  // namespace diffract::sweep
