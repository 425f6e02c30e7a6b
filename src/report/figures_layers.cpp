// Layer-wise curves: per metric, one panel per role; per model the mean across heads (solid), the
// median (dashed) and mean ± 1 std (band) at each layer, or the whole matrix where no head block has a
// trusted value; whole matrices whose fit is flagged are drawn hollow at their value.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// Whether the curves of `role` for `model` come from head blocks (values_by_layer's rule).
bool from_heads(const std::vector<const Record*>& records, const std::string& model,
                const std::string& role) {
    return std::any_of(records.begin(), records.end(),
                       [&](const Record* r) { return r->model == model && r->role == role && r->head; });
}

Figure layer_curves(FigureContext& ctx, const std::string& field, const std::vector<const Record*>& records,
                    const std::vector<const Record*>& flagged, const std::vector<std::string>& roles) {
    std::vector<std::string> models;
    for (const auto& m : ctx.models)
        for (const auto* list : {&records, &flagged})
            if (std::any_of(list->begin(), list->end(), [&](const Record* r) { return r->model == m; }) &&
                std::find(models.begin(), models.end(), m) == models.end())
                models.push_back(m);
    const auto layout = grid_layout(static_cast<int>(roles.size()), 3, 300, 210, kLegendWidth);
    Svg svg(layout.width(), layout.height(), "figure", "layer-wise " + field);
    std::vector<std::string> head_panels, whole_panels;
    for (std::size_t i = 0; i < roles.size(); ++i) {
        std::map<std::string, std::map<int, std::vector<double>>> per_model;
        Axis x{"layer", {}, false, {}, false, true}, y{metric_label(field), {}, false, {}, false};
        bool heads = false;
        for (const auto& m : models) {
            per_model[m] = values_by_layer(records, m, roles[i], field);
            heads = heads || from_heads(records, m, roles[i]);
            for (const auto& [layer, vs] : per_model[m]) {
                x.range.add(layer);
                y.range.add(mean_of(vs) - stddev_of(vs));
                y.range.add(mean_of(vs) + stddev_of(vs));
                y.range.add(median_of(vs));
            }
        }
        (heads ? head_panels : whole_panels).push_back(roles[i]);
        for (const auto* r : flagged)
            if (r->role == roles[i] && r->layer) x.range.add(*r->layer), y.range.add(r->value(field));
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
            for (const auto* r : flagged)
                if (r->model == m && r->role == roles[i] && r->layer)
                    draw_ring(svg, p, {static_cast<double>(*r->layer), r->value(field)}, colour, 3.5,
                              flag_tooltip(*r, field));
        }
    }
    double ly =
        draw_legend(svg, layout.legend_x(), layout.margin_top + 4, model_legend(ctx, models), "model");
    std::vector<LegendEntry> marks{{"mean", "#555555", LegendMark::line},
                                   {"median", "#555555", LegendMark::dashed},
                                   {"mean ± 1 std", "#555555", LegendMark::band}};
    if (!flagged.empty()) marks.push_back({"fit flagged", "#555555", LegendMark::ring});
    draw_legend(svg, layout.legend_x(), ly + 10, marks, head_panels.empty() ? "per layer" : "across heads");
    const std::string source =
        head_panels.empty()
            ? "Each point is a whole matrix (one per layer and model)"
            : fmt::format(
                  "Per model: mean across attention heads (solid), median (dashed) and mean ± 1 "
                  "standard deviation (band) in {}{}",
                  fmt::join(head_panels, ", "),
                  whole_panels.empty() ? ""
                                       : fmt::format("; {} show the whole matrix (no head block with "
                                                     "a value)",
                                                     fmt::join(whole_panels, ", ")));
    return {figure_id("layers", field), fmt::format("Layer-wise {}", field),
            fmt::format("{} against layer index, one panel per role. {}. Hover a point for its value.{}",
                        metric_label(field), source, flagged_fits_sentence(ctx, field, !flagged.empty())),
            svg.str()};
}

}  // namespace

void add_layer_curves(FigureContext& ctx, std::vector<Figure>& out) {
    for (const auto& field : ctx.config.metrics) {
        const auto records = records_with(ctx, field);
        const auto flagged = flagged_whole_records(ctx, field);
        std::vector<const Record*> drawn = records;
        drawn.insert(drawn.end(), flagged.begin(), flagged.end());
        const auto roles = roles_of(ctx, drawn);
        if (drawn.empty() || roles.empty()) {
            ctx.note(
                figure_id("layers", field), "",
                fmt::format("no metrics.csv/compare.csv rows with {}{}", field,
                            flagged_fits_sentence(ctx, field).empty() ? "" : " whose fit is not flagged"));
            continue;
        }
        out.push_back(layer_curves(ctx, field, records, flagged, roles));
        const auto id = out.back().id;
        note_missing_roles(ctx, id, roles, "row with " + field);
        note_missing_models(
            ctx, id, roles, ctx.models,
            [&](std::size_t i, const std::string& m) {
                for (const auto& [layer, vs] : values_by_layer(records, m, roles[i], field))
                    if (!finite_values(vs).empty()) return true;
                return std::any_of(flagged.begin(), flagged.end(),
                                   [&](const Record* r) { return r->model == m && r->role == roles[i]; });
            },
            [&](const std::string& m, const std::string& role) {
                return missing_reason(ctx, m, field, role);
            });
    }
}

}  // namespace diffract::report
