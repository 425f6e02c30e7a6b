// Distributions across matrices: box plots of a metric per role across models (or checkpoints) with
// jittered points, and the scatter of two metrics coloured by role and by model.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "diffract/report/stats.hpp"

#include "figure_util_impl.hpp"

namespace diffract::report {

// Box plots of `field`: one panel per role, one box per entry of `categories` (models, in order).
Figure role_boxes(FigureContext& ctx, const std::string& field, const std::vector<std::string>& categories,
                  const std::string& id, const std::string& x_label) {
    const auto records = records_with(ctx, field);
    const auto roles = roles_of(ctx, records, /*layerless=*/true);  // embeddings and lm_head too
    const double panel_w = std::clamp(60.0 * static_cast<double>(categories.size()), 220.0, 420.0);
    auto layout = grid_layout(static_cast<int>(roles.size()), 3, panel_w, 210, 0);
    if (rotated_categories({x_label, {}, false, categories, false}, panel_w))
        layout.margin_bottom = kRotatedMargin;
    Svg svg(layout.width(), layout.height(), "figure", "box plots of " + field);
    for (std::size_t i = 0; i < roles.size(); ++i) {
        std::vector<std::vector<double>> values(categories.size());
        std::vector<std::vector<std::string>> tips(categories.size());
        Axis x{x_label, {}, false, categories, false}, y{metric_label(field), {}, false, {}, false};
        for (std::size_t c = 0; c < categories.size(); ++c) {
            whole_values(records, categories[c], roles[i], field, values[c], tips[c]);
            y.range.add(values[c]);
        }
        const auto p = draw_axes(svg, layout.frame(static_cast<int>(i)), roles[i], x, y);
        for (std::size_t c = 0; c < categories.size(); ++c)
            draw_box(svg, p, static_cast<double>(c), values[c], ctx.colours(categories[c]), tips[c]);
    }
    note_missing_roles(ctx, id, roles, "row with " + field);
    note_missing_models(
        ctx, id, roles, categories,
        [&](std::size_t i, const std::string& m) {
            std::vector<double> values;
            std::vector<std::string> tips;
            whole_values(records, m, roles[i], field, values, tips);
            return !finite_values(values).empty();
        },
        [&](const std::string& m, const std::string& role) {
            return missing_reason(ctx, m, field, role, true);
        });
    return {id, fmt::format("{} per role and {}", field, x_label),
            fmt::format(
                "{} of every whole matrix (one point per layer, jittered), one panel per role, one box per "
                "{}: quartiles, median (thick line) and 1.5 IQR whiskers. Hover a point for its tensor.{}",
                metric_label(field), x_label, flagged_fits_sentence(ctx, field)),
            svg.str()};
}

void add_role_boxes(FigureContext& ctx, std::vector<Figure>& out) {
    for (const auto& field : ctx.config.metrics) {
        if (records_with(ctx, field).empty()) {
            ctx.note(figure_id("boxes", field), "",
                     fmt::format("no metrics.csv/compare.csv rows with {}", field));
            continue;
        }
        out.push_back(role_boxes(ctx, field, ctx.models, figure_id("boxes", field), "model"));
    }
}

void add_metric_scatter(FigureContext& ctx, std::vector<Figure>& out) {
    const auto& fx = ctx.config.scatter.at(0);
    const auto& fy = ctx.config.scatter.at(1);
    std::vector<const Record*> points;
    const auto ys = records_with(ctx, fy);
    const std::set<const Record*> with_y(ys.begin(), ys.end());
    for (const auto* r : records_with(ctx, fx))
        if (!r->head && with_y.count(r)) points.push_back(r);
    const auto id = figure_id("scatter", fx + "-" + fy);
    if (points.empty()) {
        ctx.note(id, "", fmt::format("no matrix has both {} and {}", fx, fy));
        return;
    }
    for (const auto& m : ctx.models) {
        if (std::any_of(points.begin(), points.end(), [&](const Record* r) { return r->model == m; }))
            continue;
        // The first field the model lacks explains it; else its matrices have one field each.
        auto why = missing_reason(ctx, m, fx, "", true);
        if (why.starts_with("no finite")) why = missing_reason(ctx, m, fy, "", true);
        if (why.starts_with("no finite"))
            why = fmt::format("no whole matrix of it has both {} and {}", fx, fy);
        ctx.note(id, fmt::format("model '{}'", m), why);
    }
    Axis x{metric_label(fx), {}, false, {}, false}, y{metric_label(fy), {}, false, {}, false};
    for (const auto* r : points) {
        x.range.add(r->value(fx));
        y.range.add(r->value(fy));
    }
    const auto layout = grid_layout(2, 2, 340, 260, 150);
    Svg svg(layout.width(), layout.height(), "figure", "scatter");
    ColourAssigner role_colours(ctx.config.colours);
    std::vector<LegendEntry> roles, models;
    for (int panel = 0; panel < 2; ++panel) {
        const bool by_role = panel == 0;
        const auto p =
            draw_axes(svg, layout.frame(panel), by_role ? "coloured by role" : "coloured by model", x, y);
        for (const auto* r : points) {
            const auto& colour = by_role ? role_colours(r->role) : ctx.colours(r->model);
            auto& legend = by_role ? roles : models;
            const auto& key = by_role ? r->role : r->model;
            if (std::none_of(legend.begin(), legend.end(), [&](const auto& e) { return e.label == key; }))
                legend.push_back({key, colour, LegendMark::point});
            draw_point(svg, p, {r->value(fx), r->value(fy)}, colour, 3,
                       fmt::format("{} · {}: {} {:.4g}, {} {:.4g}", r->model, r->tensor, fx, r->value(fx), fy,
                                   r->value(fy)),
                       0.7);
        }
    }
    const double ly = draw_legend(svg, layout.legend_x(), layout.margin_top + 4, roles, "role");
    draw_legend(svg, layout.legend_x(), ly + 10, models, "model");
    out.push_back(
        {id, fmt::format("{} against {}", fy, fx),
         fmt::format("Every whole matrix as a point: {} (x) against {} (y); left coloured by role, right "
                     "by model. Hover a point for its tensor.{}{}",
                     metric_label(fx), metric_label(fy), flagged_fits_sentence(ctx, fx),
                     fy == fx ? "" : flagged_fits_sentence(ctx, fy)),
         svg.str()});
}

}  // namespace diffract::report
