// Layer-wise curves: per metric, one panel per role; per model the mean across heads (solid), the
// median (dashed) and mean ± 1 std (band) at each layer.
#include <fmt/format.h>

#include "diffract/report/stats.hpp"
#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

constexpr double kLegendWidth = 170;

std::vector<LegendEntry> model_legend(FigureContext& ctx, const std::vector<std::string>& models) {
    std::vector<LegendEntry> entries;
    for (const auto& m : models) entries.push_back({m, ctx.colours(m), LegendMark::line});
    return entries;
}

Figure layer_curves(FigureContext& ctx, const std::string& field, const std::vector<const Record*>& records,
                    const std::vector<std::string>& roles) {
    std::vector<std::string> models;
    for (const auto& m : ctx.models)
        for (const auto* r : records)
            if (r->model == m) {
                models.push_back(m);
                break;
            }
    const auto layout = grid_layout(static_cast<int>(roles.size()), 3, 300, 210, kLegendWidth);
    Svg svg(layout.width(), layout.height(), "figure", "layer-wise " + field);
    for (std::size_t i = 0; i < roles.size(); ++i) {
        std::map<std::string, std::map<int, std::vector<double>>> per_model;
        Axis x{"layer", {}, false, {}, false, true}, y{metric_label(field), {}, false, {}, false};
        for (const auto& m : models) {
            per_model[m] = values_by_layer(records, m, roles[i], field);
            for (const auto& [layer, vs] : per_model[m]) {
                x.range.add(layer);
                y.range.add(mean_of(vs) - stddev_of(vs));
                y.range.add(mean_of(vs) + stddev_of(vs));
                y.range.add(median_of(vs));
            }
        }
        const auto p = draw_axes(svg, layout.frame(static_cast<int>(i)), roles[i], x, y);
        for (const auto& m : models) {
            std::vector<double> xs, lo, hi;
            std::vector<Point> mean_pts, median_pts;
            for (const auto& [layer, vs] : per_model[m]) {
                const double mu = mean_of(vs), sd = stddev_of(vs);
                xs.push_back(layer);
                lo.push_back(mu - sd);
                hi.push_back(mu + sd);
                mean_pts.push_back({static_cast<double>(layer), mu});
                median_pts.push_back({static_cast<double>(layer), median_of(vs)});
            }
            const auto& colour = ctx.colours(m);
            draw_band(svg, p, xs, lo, hi, colour);
            draw_line(svg, p, median_pts, colour, 1.4, "5 3", m + " median");
            draw_line(svg, p, mean_pts, colour, 2.0, "", m + " mean");
            for (const auto& pt : mean_pts)
                draw_point(svg, p, pt, colour, 2.5, fmt::format("{} · layer {}: mean {:.4g}", m, pt.x, pt.y));
        }
    }
    double ly =
        draw_legend(svg, layout.legend_x(), layout.margin_top + 4, model_legend(ctx, models), "model");
    draw_legend(svg, layout.legend_x(), ly + 10,
                {{"mean", "#555555", LegendMark::line},
                 {"median", "#555555", LegendMark::dashed},
                 {"mean ± 1 std", "#555555", LegendMark::band}},
                "across heads");
    return {figure_id("layers", field), fmt::format("Layer-wise {}", field),
            fmt::format(
                "{} against layer index, one panel per role. Per model: mean across attention heads (solid), "
                "median (dashed) and mean ± 1 standard deviation (band); roles without head blocks show "
                "the whole matrix. Hover a point for its value.{}",
                metric_label(field), flagged_fits_sentence(ctx, field)),
            svg.str()};
}

}  // namespace

void add_layer_curves(FigureContext& ctx, std::vector<Figure>& out) {
    for (const auto& field : ctx.config.metrics) {
        const auto records = records_with(ctx, field);
        const auto roles = roles_of(ctx, records);
        if (records.empty() || roles.empty()) {
            ctx.note(
                figure_id("layers", field), "",
                fmt::format("no metrics.csv/compare.csv rows with {}{}", field,
                            flagged_fits_sentence(ctx, field).empty() ? "" : " whose fit is not flagged"));
            continue;
        }
        out.push_back(layer_curves(ctx, field, records, roles));
        const auto id = out.back().id;
        note_missing_roles(ctx, id, roles, "row with " + field);
        note_missing_models(
            ctx, id, roles, ctx.models,
            [&](std::size_t i, const std::string& m) {
                for (const auto& [layer, vs] : values_by_layer(records, m, roles[i], field))
                    if (!finite_values(vs).empty()) return true;
                return false;
            },
            [&](const std::string& m, const std::string& role) {
                return missing_reason(ctx, m, field, role);
            });
    }
}

}  // namespace diffract::report
