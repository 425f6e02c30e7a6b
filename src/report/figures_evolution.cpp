// Evolution over a training series: each metric against the checkpoint's step (or token count, or
// position), one panel per role, mean across layers and heads with its ±1 std band and the median;
// and box plots per checkpoint in training order.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "diffract/report/series.hpp"
#include "diffract/report/stats.hpp"
#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

Figure evolution_curves(FigureContext& ctx, const std::string& field, const Series& series) {
    const auto records = records_with(ctx, field);
    const auto roles = roles_of(ctx, records);
    const auto layout = grid_layout(static_cast<int>(roles.size()), 3, 300, 210, 150);
    Svg svg(layout.width(), layout.height(), "figure", "evolution of " + field);
    std::vector<LegendEntry> legend;
    for (std::size_t i = 0; i < roles.size(); ++i) {
        std::vector<double> xs, lo, hi;
        std::vector<Point> mean_pts, median_pts;
        std::vector<std::size_t> counts;
        Axis x{series.axis_label, {}, false, {}, false}, y{metric_label(field), {}, false, {}, false};
        for (std::size_t k = 0; k < series.models.size(); ++k) {
            std::vector<double> vs;
            for (const auto& [layer, v] : values_by_layer(records, series.models[k], roles[i], field))
                vs.insert(vs.end(), v.begin(), v.end());
            const double mu = mean_of(vs), sd = stddev_of(vs);
            xs.push_back(series.x[k]);
            lo.push_back(mu - sd);
            hi.push_back(mu + sd);
            mean_pts.push_back({series.x[k], mu});
            median_pts.push_back({series.x[k], median_of(vs)});
            counts.push_back(finite_values(vs).size());
            x.range.add(series.x[k]);
            y.range.add({mu - sd, mu + sd});
        }
        const auto p = draw_axes(svg, layout.frame(static_cast<int>(i)), roles[i], x, y);
        const auto& colour = ctx.colours(roles[i]);
        draw_band(svg, p, xs, lo, hi, colour);
        draw_line(svg, p, median_pts, colour, 1.4, "5 3", roles[i] + " median");
        draw_line(svg, p, mean_pts, colour, 2.0, "", roles[i] + " mean");
        for (std::size_t k = 0; k < mean_pts.size(); ++k)
            draw_point(svg, p, mean_pts[k], colour, 3,
                       fmt::format("{} ({}): mean {:.4g}, median {:.4g}, n = {}", series.models[k], roles[i],
                                   mean_pts[k].y, median_pts[k].y, counts[k]));
    }
    draw_legend(svg, layout.legend_x(), layout.margin_top + 4,
                {{"mean", "#555555", LegendMark::line},
                 {"median", "#555555", LegendMark::dashed},
                 {"mean ± 1 std", "#555555", LegendMark::band}},
                "across layers, heads");
    const auto id = figure_id("evolution", field);
    note_missing_roles(ctx, id, roles, "row with " + field);
    note_missing_models(
        ctx, id, roles, series.models,
        [&](std::size_t i, const std::string& m) {
            for (const auto& [layer, vs] : values_by_layer(records, m, roles[i], field))
                if (!finite_values(vs).empty()) return true;
            return false;
        },
        [&](const std::string& m, const std::string& role) { return missing_reason(ctx, m, field, role); });
    return {id, fmt::format("Evolution of {} over training", field),
            fmt::format(
                "{} against {} for the checkpoints {}, one panel per role: mean over every layer and head "
                "(solid), median (dashed), mean ± 1 std (band).{}",
                metric_label(field), series.axis_label, fmt::format("{}", fmt::join(series.models, ", ")),
                flagged_fits_sentence(ctx, field)),
            svg.str()};
}

}  // namespace

void add_evolution(FigureContext& ctx, std::vector<Figure>& out) {
    const auto series = order_series(ctx.models);
    const bool on = ctx.config.evolution.value_or(series.from_names && series.models.size() >= 3);
    if (!on) {
        ctx.notes.push_back(
            "evolution figures: off (pass --evolution, or name checkpoints with their step, e.g. "
            "step1000)");
        return;
    }
    for (const auto& field : ctx.config.metrics) {
        if (records_with(ctx, field).empty()) {
            ctx.note(figure_id("evolution", field), "", fmt::format("no metrics.csv rows with {}", field));
            continue;
        }
        out.push_back(evolution_curves(ctx, field, series));
        out.push_back(
            role_boxes(ctx, field, series.models, figure_id("evolution-boxes", field), "checkpoint"));
    }
}

}  // namespace diffract::report
