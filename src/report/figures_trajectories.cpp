// A watched training run (diffract watch: tables with a step column): each metric against the step,
// one small panel per layer, one line per role, with the alerts of that layer marked on the step axis;
// and the head importance against the base as a heatmap over steps (rows: layer and head).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

constexpr char kAlertColour[] = "#d62728";

std::vector<std::int64_t> steps_of(const std::vector<const Record*>& records) {
    std::set<std::int64_t> s;
    for (const auto* r : records)
        if (r->step) s.insert(*r->step);
    return {s.begin(), s.end()};
}

Figure trajectory_figure(FigureContext& ctx, const std::string& field,
                         const std::vector<const Record*>& records) {
    std::set<int> layer_set;
    for (const auto* r : records)
        if (r->layer && !r->head) layer_set.insert(*r->layer);
    const std::vector<int> layers(layer_set.begin(), layer_set.end());
    const auto roles = roles_of(ctx, records);
    const auto layout = grid_layout(static_cast<int>(layers.size()), 4, 230, 170, 150);
    Svg svg(layout.width(), layout.height(), "figure", "trajectories of " + field);
    std::size_t marked = 0;
    for (std::size_t i = 0; i < layers.size(); ++i) {
        Axis x{"step", {}, false, {}, false}, y{metric_label(field), {}, false, {}, false};
        // (role) → step → value, whole matrices of this layer.
        std::map<std::string, std::map<std::int64_t, double>> lines;
        for (const auto* r : records)
            if (r->layer == layers[i] && !r->head && r->step &&
                std::find(roles.begin(), roles.end(), r->role) != roles.end()) {
                const double v = r->value(field);
                if (!std::isfinite(v)) continue;
                lines[r->role][*r->step] = v;
                x.range.add(static_cast<double>(*r->step));
                y.range.add(v);
            }
        const auto p =
            draw_axes(svg, layout.frame(static_cast<int>(i)), fmt::format("layer {}", layers[i]), x, y);
        for (const auto& [role, pts] : lines) {
            std::vector<Point> line;
            for (const auto& [s, v] : pts) line.push_back({static_cast<double>(s), v});
            draw_line(svg, p, line, ctx.colours(role), 1.6, "", role);
            for (const auto& [s, v] : pts)
                draw_point(svg, p, {static_cast<double>(s), v}, ctx.colours(role), 2.5,
                           fmt::format("layer {} {} · step {}: {:.4g}", layers[i], role, s, v));
        }
        if (y.range.empty()) continue;
        for (const auto& a : ctx.data.alerts)
            if (const auto at = static_cast<double>(a.step); a.layer == layers[i] && a.field == field &&
                                                             lines.count(a.role) && at >= x.range.lo &&
                                                             at <= x.range.hi) {
                draw_point(svg, p, {at, y.range.lo}, kAlertColour, 3.5,
                           fmt::format("step {}: {}", a.step, a.message));
                ++marked;
            }
    }
    std::vector<LegendEntry> legend;
    for (const auto& role : roles) legend.push_back({role, ctx.colours(role), LegendMark::line});
    legend.push_back({"alert", kAlertColour, LegendMark::point});
    draw_legend(svg, layout.legend_x(), layout.margin_top + 4, legend, "whole matrices");
    return {
        figure_id("trajectory", field), fmt::format("Trajectory of {} over training steps", field),
        fmt::format(
            "{} of each layer's whole matrices against the training step, one panel per layer, one line per "
            "role ({}). {} red points on the lower edge mark the steps where an alert on {} fired for "
            "a matrix drawn in that panel (alerts.csv: WeightWatcher's alpha range, jumps between "
            "checkpoints); hover for the rule.",
            metric_label(field), fmt::format("{}", fmt::join(roles, ", ")), marked, field),
        svg.str()};
}

Figure importance_over_steps(FigureContext& ctx) {
    std::set<std::pair<int, int>> head_set;
    std::set<std::int64_t> step_set;
    for (const auto& h : ctx.data.heads)
        if (h.step && ctx.layer_selected(h.layer))
            head_set.insert({h.layer, h.head}), step_set.insert(*h.step);
    const std::vector<std::pair<int, int>> heads(head_set.begin(), head_set.end());
    const std::vector<std::int64_t> steps(step_set.begin(), step_set.end());
    std::set<std::int64_t> alert_steps;
    for (const auto& a : ctx.data.alerts)
        if (a.kind == "head_concentration") alert_steps.insert(a.step);
    std::vector<std::vector<double>> cells(heads.size(), std::vector<double>(steps.size(), NAN));
    Range range;
    for (const auto& h : ctx.data.heads) {
        if (!h.step || !head_set.count({h.layer, h.head})) continue;
        const auto r =
            std::lower_bound(heads.begin(), heads.end(), std::pair{h.layer, h.head}) - heads.begin();
        const auto c = std::lower_bound(steps.begin(), steps.end(), *h.step) - steps.begin();
        cells[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)] = h.importance;
        if (std::isfinite(h.importance)) range.add(h.importance);
    }
    Axis x{"step (⚠: head updates concentrate)", {}, false, {}, false},
        y{"layer · head", {}, false, {}, false};
    for (const auto s : steps)
        x.categories.push_back(fmt::format("{}{}", s, alert_steps.count(s) ? " ⚠" : ""));
    for (const auto& [l, h] : heads) y.categories.push_back(fmt::format("L{} H{}", l, h));
    const double pw = std::clamp(26.0 * static_cast<double>(steps.size()), 220.0, 900.0);
    const double ph = std::clamp(12.0 * static_cast<double>(heads.size()), 160.0, 900.0);
    const auto layout = grid_layout(1, 1, pw, ph, 110);
    Svg svg(layout.width(), layout.height(), "figure", "head importance over steps");
    const auto p = draw_axes(svg, layout.frame(0), "importance against the base", x, y);
    const auto map = make_colour_map(ColourMapKind::sequential, range.empty() ? 0 : range.lo,
                                     range.empty() ? 1 : range.hi);
    draw_heatmap(svg, p, cells, map, [&](int r, int c) {
        const auto& [l, h] = heads[static_cast<std::size_t>(r)];
        return fmt::format("layer {}, head {} · step {}: importance {:.4g}", l, h,
                           steps[static_cast<std::size_t>(c)],
                           cells[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)]);
    });
    draw_colour_bar(svg, layout.width() - layout.legend_w + 8, layout.margin_top, layout.panel_h, map,
                    "importance");
    return {"head-importance-over-steps", "Head importance over training steps",
            fmt::format(
                "Each head's importance against the base (heads.csv) at each watched step: one row per layer "
                "and head, one column per step. ⚠ marks the {} step(s) where the largest tenth of the heads "
                "held more than the --head-share of the update (alerts.csv).",
                alert_steps.size()),
            svg.str()};
}

}  // namespace

void add_trajectories(FigureContext& ctx, std::vector<Figure>& out) {
    for (const auto& field : ctx.config.metrics) {
        std::vector<const Record*> records;
        for (const auto* r : records_with(ctx, field))
            if (r->step) records.push_back(r);
        if (steps_of(records).size() < 2) continue;  // not a watched run (or one checkpoint)
        out.push_back(trajectory_figure(ctx, field, records));
    }
    const bool head_steps = std::count_if(ctx.data.heads.begin(), ctx.data.heads.end(),
                                          [](const HeadScore& h) { return h.step.has_value(); }) > 0;
    if (head_steps) out.push_back(importance_over_steps(ctx));
}

}  // namespace diffract::report
