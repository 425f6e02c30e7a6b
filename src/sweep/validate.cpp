// sweep validate: does the head ranking predict what rewinding heads does, and does it hold under a
// second reference domain? (sweep.hpp, ValidateSweep; docs/edit.md, "Validating a ranking")
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "diffract/analysis/rank_correlation.hpp"
#include "diffract/core/atomic_file.hpp"
#include "diffract/core/csv_field.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/core/random.hpp"
#include "diffract/sweep/score_direction.hpp"
#include "diffract/sweep/sweep.hpp"
#include "rewind_candidates_impl.hpp"

namespace diffract::sweep {
namespace {

using analysis::HeadRow;

edit::RewindHead rewind_head(const HeadRow& s) { return {s.layer, s.head, s.ranked}; }

// The heads from least to most important (the rewind order: rank 0 first).
std::vector<const HeadRow*> by_rank(const std::vector<HeadRow>& scores) {
    std::vector<const HeadRow*> out;
    for (const auto& s : scores) out.push_back(&s);
    std::sort(out.begin(), out.end(),
              [](const HeadRow* a, const HeadRow* b) { return a->ranked.rank < b->ranked.rank; });
    return out;
}

// One candidate per head set (detail::rewind_candidate: the model itself when it rewinds nothing).
struct SetPlan {
    Order set = Order::unedited;  // unedited, each, bottom, top, random_bottom, random_top
    std::uint64_t seed = 0;
    std::vector<edit::RewindHead> heads;
};

std::vector<Candidate> candidates_of(const std::vector<SetPlan>& plans, const ValidateSweep& v) {
    const auto& w = v.rewind;
    std::vector<Candidate> out;
    for (std::size_t i = 0; i < plans.size(); ++i) {
        const auto& p = plans[i];
        auto c = detail::rewind_candidate(w, p.heads, true);
        c.order = p.set;
        c.seed = p.seed;
        c.x = static_cast<double>(p.heads.size());
        c.label = p.set == Order::each       ? detail::unit_label(w, p.heads[0])
                  : p.set == Order::unedited ? std::string(order_name(Order::unedited))
                                             : fmt::format("{}_s{}", order_name(p.set), p.seed);
        out.push_back(std::move(c));
    }
    return out;
}

std::string interval_text(const analysis::Interval& ci) {
    return std::isfinite(ci.low) ? fmt::format("95% CI {:.2f} .. {:.2f}", ci.low, ci.high) : "no interval";
}

// The predictive check's verdict line (`unit`: "head" or "expert").
std::string predictive_verdict(double rho, const analysis::Interval& ci, double p, std::size_t n,
                               const edit::RewindUnitWords& unit) {
    const auto stats = fmt::format("Spearman {:.2f} ({}, permutation p = {:.3g}, {} {})", rho,
                                   interval_text(ci), p, n, unit.plural);
    if (ci.low > 0)
        return fmt::format(
            "the ranking predicts what rewinding one {0} does: {1}: the more important {2}, "
            "the more rewinding it alone costs",
            unit.singular, stats, unit.one);
    if (ci.high < 0)
        return fmt::format(
            "the ranking predicts the opposite of its claim: {}: rewinding the more important {} "
            "alone costs less",
            stats, unit.plural);
    return fmt::format(
        "no evidence that the ranking predicts what rewinding one {} does: {} (the interval "
        "includes 0)",
        unit.singular, stats);
}

// A set's harm (the score lost) against its matched random sets', worded as score changes: how the set
// compares with all of them and with their mean.
std::string set_verdict(const std::string& what, int k, double harm, const std::vector<double>& random,
                        bool least, double direction, const edit::RewindUnitWords& unit) {
    auto change = [&](double h) { return fmt::format("{:+.4g}", -direction * h + 0.0); };  // + 0.0: no "-0"
    const auto head =
        fmt::format("rewinding the {} {} {} changes the score by {}", k, what, unit.plural, change(harm));
    if (random.empty()) return head;
    const double mean =
        std::accumulate(random.begin(), random.end(), 0.0) / static_cast<double>(random.size());
    const auto [lo, hi] = std::minmax_element(random.begin(), random.end());
    // The least important should cost less than random heads, the most important more.
    const bool beats_all = least ? harm < *lo : harm > *hi;
    const bool beats_mean = least ? harm < mean : harm > mean;
    const char* better = least ? "better" : "worse";
    const double c1 = -direction * *lo + 0.0, c2 = -direction * *hi + 0.0;
    return fmt::format("{}; {} random sets rewinding as much weight: {} on average ({:+.4g} .. {:+.4g}): {}",
                       head, random.size(), change(mean), std::min(c1, c2), std::max(c1, c2),
                       beats_all    ? fmt::format("{} than every one of them", better)
                       : beats_mean ? fmt::format("{} than their mean, not than all", better)
                                    : fmt::format("no {} than random {}", better, unit.plural));
}

// The plan: the heads in layer-major order, then the candidates' head sets — unedited, each head alone,
// the k least and most important, and the random sets matched to each.
struct ValidationPlan {
    edit::RewindUnitWords unit;         // heads or experts (every "head" below is a unit)
    std::vector<const HeadRow*> heads;  // plans[i + 1] rewinds heads[i] alone
    std::vector<SetPlan> plans;
    int k = 0;
    std::size_t first_set = 0;  // plans[first_set] = bottom, [first_set + 1] = top, then the random sets
};

ValidationPlan plan_validation(const std::vector<HeadRow>& scores, const ValidateSweep& v,
                               std::int64_t max_candidates) {
    const auto ranked = by_rank(scores);
    const auto n = static_cast<int>(scores.size());
    ValidationPlan p;
    p.unit = edit::rewind_unit_words(v.rewind.unit);
    p.k = v.k > 0 ? v.k : std::max(1, static_cast<int>(std::lround(n / 4.0)));
    if (p.k > n)
        throw InputError(
            fmt::format("--k: expected at most the model's {} {}, found {}", n, p.unit.plural, p.k));
    const double total = 1.0 + n + 2.0 + 2.0 * v.seeds;
    if (total > static_cast<double>(max_candidates))
        edit::throw_too_many_candidates(
            fmt::format("sweep validate (1 + {} + 2 + 2 x --seeds)", p.unit.plural), total, max_candidates);
    for (const auto& s : scores) p.heads.push_back(&s);
    std::sort(p.heads.begin(), p.heads.end(), [](const HeadRow* a, const HeadRow* b) {
        return std::pair(a->layer, a->head) < std::pair(b->layer, b->head);
    });
    p.plans.push_back({Order::unedited, 0, {}});
    for (const auto* h : p.heads) p.plans.push_back({Order::each, 0, {rewind_head(*h)}});
    std::vector<edit::RewindHead> bottom, top;
    for (int i = 0; i < p.k; ++i) bottom.push_back(rewind_head(*ranked[static_cast<std::size_t>(i)]));
    for (int i = n - p.k; i < n; ++i) top.push_back(rewind_head(*ranked[static_cast<std::size_t>(i)]));
    p.first_set = p.plans.size();
    p.plans.push_back({Order::bottom, 0, bottom});
    p.plans.push_back({Order::top, 0, top});
    for (int i = 0; i < v.seeds; ++i) {
        const std::uint64_t seed = v.first_seed + static_cast<std::uint64_t>(i);
        p.plans.push_back(
            {Order::random_bottom, seed,
             detail::matched_random_units(v.rewind, scores, bottom, stream_seed(seed, "validate-bottom"))});
        p.plans.push_back(
            {Order::random_top, seed,
             detail::matched_random_units(v.rewind, scores, top, stream_seed(seed, "validate-top"))});
    }
    return p;
}

// What the evaluations gave: each candidate's harm, the score lost against the unedited model in the
// score's direction.
struct Harms {
    const SweepRun& run;
    double unedited, direction;
    double operator()(std::size_t i) const { return direction * (unedited - run.records[i].curve_score()); }
};

// The predictive check over the heads with a finite importance and harm: summary.json's "predictive"
// and its verdict.
std::string predictive_check(const ValidationPlan& p, const Harms& harm, const ValidateSweep& v,
                             nlohmann::ordered_json& summary) {
    std::vector<double> importance, head_harm;
    for (std::size_t i = 0; i < p.heads.size(); ++i)
        if (std::isfinite(p.heads[i]->ranked.importance) && std::isfinite(harm(i + 1)))
            importance.push_back(p.heads[i]->ranked.importance), head_harm.push_back(harm(i + 1));
    const double rho = analysis::spearman(importance, head_harm);
    const auto ci =
        analysis::bootstrap_interval(importance, head_harm, analysis::spearman, v.draws, v.first_seed);
    const double pv =
        analysis::permutation_p_value(importance, head_harm, analysis::spearman, v.draws, v.first_seed);
    summary["predictive"] = {{"spearman", number_json(rho)},
                             {"ci95", {number_json(ci.low), number_json(ci.high)}},
                             {"p_value", number_json(pv)},
                             {std::string(p.unit.plural), importance.size()},
                             {"draws", v.draws}};
    return predictive_verdict(rho, ci, pv, importance.size(), p.unit);
}

// The sets against their matched random sets: summary.json's "sets" and two verdicts.
std::vector<std::string> sets_check(const ValidationPlan& p, const Harms& harm,
                                    nlohmann::ordered_json& summary) {
    std::vector<double> random_bottom, random_top;
    nlohmann::ordered_json sets = nlohmann::ordered_json::array();
    for (std::size_t i = p.first_set; i < p.plans.size(); ++i) {
        if (i >= p.first_set + 2)
            (p.plans[i].set == Order::random_bottom ? random_bottom : random_top).push_back(harm(i));
        nlohmann::ordered_json j{{"set", std::string(order_name(p.plans[i].set))},
                                 {"seed", p.plans[i].seed},
                                 {"harm", number_json(harm(i))},
                                 {"score", number_json(harm.run.records[i].curve_score())}};
        for (const auto& [name, value] : harm.run.records[i].columns) j[name] = value;
        sets.push_back(j);
    }
    summary["sets"] = sets;
    return {
        set_verdict("least important", p.k, harm(p.first_set), random_bottom, true, harm.direction, p.unit),
        set_verdict("most important", p.k, harm(p.first_set + 1), random_top, false, harm.direction, p.unit)};
}

using SecondRanks = std::map<std::pair<int, int>, const HeadRow*>;

// The ranking under the second reference compared head by head: summary.json's "stability" and its
// verdict, naming the heads whose rank moves most.
std::string stability_check(const ValidationPlan& p, const SecondRanks& second_of, const ValidateSweep& v,
                            nlohmann::ordered_json& summary) {
    std::vector<double> a, b;
    std::vector<std::pair<int, const HeadRow*>> moved;
    for (const auto* h : p.heads)
        if (const auto it = second_of.find({h->layer, h->head});
            it != second_of.end() && std::isfinite(h->ranked.importance) &&
            std::isfinite(it->second->ranked.importance)) {
            a.push_back(h->ranked.importance), b.push_back(it->second->ranked.importance);
            moved.emplace_back(std::abs(h->ranked.rank - it->second->ranked.rank), h);
        }
    const double tau = analysis::kendall_tau_b(a, b);
    const auto ci = analysis::bootstrap_interval(a, b, analysis::kendall_tau_b, v.draws, v.first_seed);
    std::stable_sort(moved.begin(), moved.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    nlohmann::ordered_json moved_json = nlohmann::ordered_json::array();
    std::string moved_text;
    for (std::size_t i = 0; i < moved.size() && i < 5 && moved[i].first > 0; ++i) {
        const auto* h = moved[i].second;
        const int r2 = second_of.at({h->layer, h->head})->ranked.rank;
        moved_json.push_back({{"layer", h->layer},
                              {std::string(p.unit.singular), h->head},
                              {"rank", h->ranked.rank},
                              {"rank_second", r2}});
        moved_text += fmt::format("{}L{} {}{} ({} -> {})", moved_text.empty() ? "" : ", ", h->layer,
                                  p.unit.letter, h->head, h->ranked.rank, r2);
    }
    summary["stability"] = {{"kendall_tau", number_json(tau)},
                            {"ci95", {number_json(ci.low), number_json(ci.high)}},
                            {std::string(p.unit.plural), a.size()},
                            {"moved", moved_json}};
    const auto stats =
        fmt::format("Kendall tau {:.2f} ({}, {} {})", tau, interval_text(ci), a.size(), p.unit.plural);
    return (ci.low > 0
                ? "the ranking holds under the second reference domain: " + stats
                : "the ranking depends on the reference domain: " + stats + " (the interval includes 0)") +
           (moved_text.empty()
                ? std::string()
                : fmt::format("; {} that move most (rank first -> second): {}", p.unit.plural, moved_text));
}

// heads_validation.csv's table: a row per head (with the second reference's importance and rank).
Table heads_table(const ValidationPlan& p, const Harms& harm, const SecondRanks* second_of) {
    std::vector<std::size_t> rows(p.heads.size());
    std::iota(rows.begin(), rows.end(), std::size_t{0});
    auto count = [](std::int64_t x) { return Cell{x}; };
    std::vector<Column<std::size_t>> columns{
        {"layer", [&](std::size_t i) { return count(p.heads[i]->layer); }},
        {std::string(p.unit.singular), [&](std::size_t i) { return count(p.heads[i]->head); }},
        {"importance", [&](std::size_t i) -> Cell { return p.heads[i]->ranked.importance; }},
        {"rank", [&](std::size_t i) { return count(p.heads[i]->ranked.rank); }},
        {"score", [&](std::size_t i) -> Cell { return harm.run.records[i + 1].curve_score(); }},
        {"harm", [&](std::size_t i) -> Cell { return harm(i + 1); }}};
    if (second_of) {
        auto other = [&](std::size_t i) -> const HeadRow* {
            const auto it = second_of->find({p.heads[i]->layer, p.heads[i]->head});
            return it == second_of->end() ? nullptr : it->second;
        };
        columns.push_back({"importance_second", [=](std::size_t i) -> Cell {
                               return other(i) ? Cell{other(i)->ranked.importance} : Cell{std::nan("")};
                           }});
        columns.push_back({"rank_second", [=](std::size_t i) -> Cell {
                               return other(i) ? count(other(i)->ranked.rank) : Cell{};
                           }});
    }
    return make_table<std::size_t>(columns, rows);
}

// sets.csv's table: a row per set, with what it rewinds.
Table sets_table(const ValidationPlan& p, const Harms& harm) {
    std::vector<std::size_t> rows;
    for (std::size_t i = p.first_set; i < p.plans.size(); ++i) rows.push_back(i);
    const auto& records = harm.run.records;
    std::vector<Column<std::size_t>> columns{
        {"set", [&](std::size_t i) -> Cell { return std::string(order_name(p.plans[i].set)); }},
        {"seed", [&](std::size_t i) -> Cell { return static_cast<std::uint64_t>(p.plans[i].seed); }}};
    for (std::size_t c = 0; c < records[p.first_set].columns.size(); ++c)
        columns.push_back({records[p.first_set].columns[c].first,
                           [&, c](std::size_t i) { return Cell{records[i].columns[c].second}; }});
    columns.push_back({"score", [&](std::size_t i) -> Cell { return records[i].curve_score(); }});
    columns.push_back({"harm", [&](std::size_t i) -> Cell { return harm(i); }});
    return make_table<std::size_t>(columns, rows);
}

}  // namespace

// The stages: the head scores and the plan, the evaluations, the three checks, the outputs.
SweepOutputs sweep_validate(const SweepConfig& config, const ValidateSweep& v) {
    const auto& w = v.rewind;
    if (v.seeds < 0) throw InputError(fmt::format("--seeds: expected at least 0, found {}", v.seeds));
    if (v.draws < 1) throw InputError(fmt::format("draws: expected at least 1, found {}", v.draws));
    const auto scores = detail::unit_scores(w.base, w.model, w.reference ? &*w.reference : nullptr, w);
    const auto plan = plan_validation(scores, v, config.max_candidates);
    const auto run =
        run_candidates(detail::sized(config, w.model), {{RefRole::base, &w.base}, {RefRole::model, &w.model}},
                       candidates_of(plan.plans, v));
    const Harms harm{run, run.records[0].curve_score(), v.lower_is_better ? -1.0 : 1.0};

    nlohmann::ordered_json summary{{"sweep", std::string(kind_name(Kind::validate))},
                                   {"unit", std::string(name_of(edit::kRewindUnitNames, w.unit))},
                                   {std::string(plan.unit.plural), plan.heads.size()},
                                   {"k", plan.k},
                                   {"direction", direction_name(v.lower_is_better)},
                                   {"unedited_score", number_json(harm.unedited)}};
    add_score_key(config, summary);
    std::vector<std::string> verdict{predictive_check(plan, harm, v, summary)};
    for (auto& line : sets_check(plan, harm, summary)) verdict.push_back(std::move(line));
    std::vector<HeadRow> second;
    SecondRanks second_of;
    if (v.second_reference) {
        second = detail::unit_scores(w.base, w.model, &*v.second_reference, w);
        for (const auto& s : second) second_of[{s.layer, s.head}] = &s;
        verdict.push_back(stability_check(plan, second_of, v, summary));
    }
    summary["verdict"] = verdict;
    summary["references"] = references_json(config, run.references);

    SweepOutputs out{heads_table(plan, harm, v.second_reference ? &second_of : nullptr),
                     json_text(summary, 2) + "\n"};
    const std::filesystem::path dir(config.out_dir);
    write_file_atomically((dir / unit_table_file(Kind::validate, w.unit)).string(), to_csv(out.table));
    write_file_atomically((dir / "sets.csv").string(), to_csv(sets_table(plan, harm)));
    write_file_atomically((dir / "summary.json").string(), out.summary);
    out.lines = run.lines;
    if (config.quiet < 2)
        for (const auto& line : verdict) out.lines.push_back("sweep validate: " + line);
    return out;
}

}  // namespace diffract::sweep
