// The four sweeps: rewind (orderings × fractions), rewind-each (one head at a time), truncate, interpolate.
#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "diffract/core/atomic_file.hpp"
#include "diffract/core/csv_field.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/core/random.hpp"
#include "diffract/sweep/sweep.hpp"
#include "rewind_candidates_impl.hpp"

namespace diffract::sweep {
namespace {

using detail::sized;

std::string x_label(double x) { return format_value(x); }

// The units' scores against the base (and the reference, when given): a compare job.
std::vector<analysis::HeadRow> unit_scores(const RewindSweep& w) {
    return detail::unit_scores(w.base, w.model, w.reference ? &*w.reference : nullptr, w);
}

}  // namespace

SweepOutputs sweep_rewind(const SweepConfig& config, const RewindSweep& w) {
    double total = 0;  // orderings x seeds x fractions, counted before anything is opened or made
    for (const auto order : w.orders)
        total +=
            (order == analysis::HeadOrder::random ? w.seeds : 1) * static_cast<double>(w.fractions.size());
    if (total > static_cast<double>(config.max_candidates))
        edit::throw_too_many_candidates("sweep rewind (--orders x --seeds x --fractions)", total,
                                        config.max_candidates);
    const auto& base = w.base;
    const auto& model = w.model;
    const auto scores = unit_scores(w);
    // Random orderings are matched to the importance ordering when it is swept too: at each x the
    // random heads fill as many key/value groups with as many query heads as the importance heads do,
    // so both rewind the same query heads, K/V blocks and weight entries (under GQA a plain random
    // ordering completes far fewer K/V groups, and the comparison measured the amount rewound). Experts:
    // as many experts of each size.
    const bool matched =
        std::find(w.orders.begin(), w.orders.end(), analysis::HeadOrder::importance) != w.orders.end();
    std::map<double, std::vector<edit::RewindHead>> importance_heads;
    if (matched)
        for (double x : w.fractions)
            importance_heads[x] =
                edit::lowest_heads(scores, {w.scope, analysis::HeadOrder::importance, 0}, x);
    std::map<double, std::map<std::int64_t, std::string>> amounts;  // x -> parameters -> an ordering
    std::vector<Candidate> candidates;
    for (const auto order : w.orders) {
        const bool random = order == analysis::HeadOrder::random;
        for (int i = 0; i < (random ? w.seeds : 1); ++i) {
            analysis::HeadRankOptions ranking{w.scope, order,
                                              random ? w.first_seed + static_cast<std::uint64_t>(i) : 0};
            for (double x : w.fractions) {
                auto units = random && matched ? detail::matched_random_units(
                                                     w, scores, importance_heads.at(x),
                                                     stream_seed(ranking.seed, "matched-random", x_label(x)))
                                               : edit::lowest_heads(scores, ranking, x);
                auto c = detail::rewind_candidate(w, std::move(units), true);  // x = 0: the model itself
                // The last column is the weight entries rewound, for either unit (rewound_columns).
                amounts[x].emplace(c.columns.back().second, std::string(analysis::head_order_name(order)));
                c.order = order_of(order);
                c.seed = ranking.seed;
                c.x = x;
                c.label = fmt::format("{}_s{}_x{}", order_name(c.order), c.seed, x_label(x));
                candidates.push_back(std::move(c));
            }
        }
    }
    // Orderings compared at one x that rewind different amounts of weight (agreement, pl_ks, or random
    // without importance) compare amounts as much as orderings: said, not hidden.
    std::vector<std::string> warnings;
    for (const auto& [x, by_parameters] : amounts)
        if (by_parameters.size() > 1) {
            std::string what;
            for (const auto& [p, order] : by_parameters)
                what += fmt::format("{}{} {}", what.empty() ? "" : ", ", order, p);
            warnings.push_back(
                fmt::format("at x = {} the orderings rewind different amounts of weight ({} weight entries): "
                            "their scores compare amounts as well as orderings",
                            x_label(x), what));
        }
    auto run =
        run_candidates(sized(config, model), {{RefRole::base, &base}, {RefRole::model, &model}}, candidates);
    run.unit = w.unit;
    auto out = write_outputs(config, Kind::rewind, run);
    out.warnings = std::move(warnings);
    return out;
}

SweepOutputs sweep_rewind_each(const SweepConfig& config, const RewindSweep& w) {
    const auto& base = w.base;
    const auto& model = w.model;
    const auto scores = unit_scores(w);
    const auto words = edit::rewind_unit_words(w.unit);
    std::vector<Candidate> candidates;
    auto add = [&](std::vector<edit::RewindHead> heads, const std::string& label, double x) {
        const bool unedited = heads.empty();
        auto c = detail::rewind_candidate(w, std::move(heads), false);
        c.order = unedited ? Order::unedited : Order::each;
        c.x = x;
        c.label = label;
        candidates.push_back(std::move(c));
    };
    add({}, "unedited", 0);
    std::vector<std::pair<int, int>> heads;
    for (const auto& s : scores) heads.emplace_back(s.layer, s.head);
    std::sort(heads.begin(), heads.end());
    for (std::size_t i = 0; i < heads.size(); ++i) {
        edit::RewindHead h{heads[i].first, heads[i].second, {}};
        h.ranked.layer = h.layer, h.ranked.head = h.head;
        add({h}, detail::unit_label(w, h), static_cast<double>(i));
    }
    const auto run =
        run_candidates(sized(config, model), {{RefRole::base, &base}, {RefRole::model, &model}}, candidates);
    const auto& records = run.records;
    const double unedited = records[0].curve_score();
    std::vector<std::size_t> index(heads.size());  // 0, 1, ...: the heads in their order
    std::iota(index.begin(), index.end(), std::size_t{0});
    auto order = index;
    // greedy_rank 0: the head whose rewind improves the score most (raises it unless lower is better).
    const bool lower = config.lower_is_better.value_or(false);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const double sa = records[a + 1].curve_score(), sb = records[b + 1].curve_score();
        return lower ? sa < sb : sa > sb;
    });
    std::vector<int> greedy(heads.size());
    for (std::size_t r = 0; r < order.size(); ++r) greedy[order[r]] = static_cast<int>(r);
    // heads_effect.csv (experts_effect.csv): a row per unit i, its candidate records[i + 1].
    const auto score = [&](std::size_t i) { return records[i + 1].curve_score(); };
    const auto count = [](std::int64_t v) { return Cell{v}; };
    SweepOutputs out;
    out.table = make_table<std::size_t>(
        {{"layer", [&](std::size_t i) { return count(heads[i].first); }},
         {std::string(words.singular), [&](std::size_t i) { return count(heads[i].second); }},
         {"score", [&](std::size_t i) -> Cell { return score(i); }},
         {"delta", [&](std::size_t i) -> Cell { return score(i) - unedited; }},
         {"greedy_rank", [&](std::size_t i) { return count(greedy[i]); }},
         {"eval_seconds", [&](std::size_t i) -> Cell { return records[i + 1].scores.eval_seconds; }}},
        index);
    nlohmann::ordered_json summary{{"sweep", std::string(kind_name(Kind::rewind_each))},
                                   {"unedited_score", unedited},
                                   {"unit", std::string(name_of(edit::kRewindUnitNames, w.unit))},
                                   {std::string(words.plural), heads.size()},
                                   {"references", references_json(config, run.references)}};
    add_score_key(config, summary);
    out.summary = json_text(summary, 2) + "\n";
    const std::filesystem::path dir(config.out_dir);
    const auto table_file = unit_table_file(Kind::rewind_each, w.unit);
    write_file_atomically((dir / table_file).string(), to_csv(out.table));
    write_file_atomically((dir / "summary.json").string(), out.summary);
    out.lines = run.lines;
    if (config.quiet < 2)
        out.lines.push_back(fmt::format("sweep rewind-each: {} {} -> {}/{}", heads.size(), words.plural,
                                        config.out_dir, table_file));
    return out;
}

namespace {

// One candidate per grid value x, labelled ORDER_x, built by build(x, dir).
std::vector<Candidate> grid_candidates(Order order, Kind kind, const std::vector<double>& xs,
                                       const std::function<void(double, const std::string&)>& build) {
    std::vector<Candidate> candidates;
    for (double x : xs) {
        Candidate c;
        c.order = order;
        c.x = x;
        c.label = fmt::format("{}_{}", order_name(order), x_label(x));
        c.content = fmt::format("{}/{}={}", kind_name(kind), order_name(order), x_label(x));
        c.build = [build, x](const std::string& dir) { build(x, dir); };
        candidates.push_back(std::move(c));
    }
    return candidates;
}

}  // namespace

SweepOutputs sweep_truncate(const SweepConfig& config, const TruncateSweep& w) {
    const auto& base = w.base;
    const auto& model = w.model;
    const auto candidates =
        grid_candidates(Order::keep, Kind::truncate, w.keeps, [&](double x, const std::string& dir) {
            edit::truncate(dir, base, model, {edit::TruncateRule::Kind::keep, x}, w.common);
        });
    return write_outputs(
        config, Kind::truncate,
        run_candidates(sized(config, model), {{RefRole::base, &base}, {RefRole::model, &model}}, candidates));
}

SweepOutputs sweep_interpolate(const SweepConfig& config, const InterpolateSweep& w) {
    const auto& a = w.a;
    const auto& b = w.b;
    auto candidates =
        grid_candidates(Order::omega, Kind::interpolate, w.omegas,
                        [&](double x, const std::string& dir) { edit::interpolate(dir, a, b, x, w.common); });
    // The endpoints copy A's and B's bytes (edit::interpolate): their scores are the references'.
    for (auto& c : candidates)
        c.same_as = c.x == 0.0   ? std::optional(RefRole::a)
                    : c.x == 1.0 ? std::optional(RefRole::b)
                                 : std::nullopt;
    return write_outputs(config, Kind::interpolate,
                         run_candidates(sized(config, a), {{RefRole::a, &a}, {RefRole::b, &b}}, candidates));
}

}  // namespace diffract::sweep
