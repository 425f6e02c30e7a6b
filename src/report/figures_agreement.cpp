// Singular-vector agreement with the base by layer (the paper's violin/box figures of vector
// agreement): per agreement field, one panel per role, at each layer one box per compared model over
// its heads (compare.csv head rows; the whole matrix where the role has none), and the agreement of
// unrelated bases (chance_*_agreement) as a dotted line.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "diffract/report/stats.hpp"
#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

constexpr const char* kChanceColour = "#555555";

// "avg_l_agreement" → "chance_l_agreement": the same measure for unrelated bases.
std::string chance_field(const std::string& field) {
    return "chance_" + field.substr(std::string("avg_").size());
}

void agreement_figure(FigureContext& ctx, const std::string& field, std::vector<Figure>& out) {
    const auto id = figure_id("agreement-layers", field);
    std::vector<const Record*> records;
    for (const auto& r : ctx.data.compare)
        if (ctx.selected(r) && r.layer && r.values.count(field)) records.push_back(&r);
    const auto roles = roles_of(ctx, records);
    if (records.empty() || roles.empty()) {
        ctx.note(id, "", fmt::format("no compare.csv rows with {}", field));
        return;
    }
    std::vector<std::string> models;  // compared models with rows, in report order
    for (const auto& m : ctx.models)
        if (std::any_of(records.begin(), records.end(), [&](const Record* r) { return r->model == m; }))
            models.push_back(m);
    std::set<int> layer_set;
    for (const auto* r : records) layer_set.insert(*r->layer);
    const std::vector<int> layers(layer_set.begin(), layer_set.end());
    const double nm = static_cast<double>(models.size());
    const double panel_w = std::clamp(static_cast<double>(layers.size()) * (nm * 14 + 10), 260.0, 1100.0);
    const auto layout = grid_layout(static_cast<int>(roles.size()), panel_w > 450 ? 1 : 3, panel_w, 210, 150);
    Svg svg(layout.width(), layout.height(), "figure", "agreement by layer: " + field);
    const double slot = 0.8 / nm;  // the share of a layer's slot each model's box takes
    for (std::size_t i = 0; i < roles.size(); ++i) {
        Axis x{"layer", {}, false, {}, false, true}, y{metric_label(field), {}, false, {}, false};
        for (int l : layers) x.categories.push_back(std::to_string(l));
        std::vector<std::map<int, std::vector<double>>> per_model;
        for (const auto& m : models) {
            per_model.push_back(values_by_layer(records, m, roles[i], field));
            for (const auto& [l, vs] : per_model.back()) y.range.add(vs);
        }
        std::vector<double> chance;
        for (const auto& m : models)
            for (const auto& [l, vs] : values_by_layer(records, m, roles[i], chance_field(field)))
                chance.insert(chance.end(), vs.begin(), vs.end());
        const double chance_level = median_of(chance);
        y.range.add(chance_level);
        const auto p = draw_axes(svg, layout.frame(static_cast<int>(i)), roles[i], x, y);
        if (std::isfinite(chance_level)) {
            svg.line(p.frame.x, p.py(chance_level), p.frame.x + p.frame.w, p.py(chance_level), kChanceColour,
                     1.2, "2 3");
            svg.text(p.frame.x + p.frame.w - 4, p.py(chance_level) - 4, "chance", 10, "end");
        }
        for (std::size_t k = 0; k < layers.size(); ++k)
            for (std::size_t j = 0; j < models.size(); ++j) {
                const auto it = per_model[j].find(layers[k]);
                if (it == per_model[j].end()) continue;
                std::vector<std::string> tips;
                for (std::size_t h = 0; h < it->second.size(); ++h)
                    tips.push_back(fmt::format("{} · {} layer {}: {:.4g}", models[j], roles[i], layers[k],
                                               it->second[h]));
                const double cx = static_cast<double>(k) + (static_cast<double>(j) - (nm - 1) / 2) * slot;
                draw_box(svg, p, cx, it->second, ctx.colours(models[j]), tips, slot * 0.4);
            }
    }
    std::vector<LegendEntry> legend;
    for (const auto& m : models) legend.push_back({m, ctx.colours(m), LegendMark::box});
    legend.push_back({"chance", kChanceColour, LegendMark::dotted});
    draw_legend(svg, layout.legend_x(), layout.margin_top + 4, legend, "model");
    note_missing_roles(ctx, id, roles, "compare row with " + field);
    note_missing_models(
        ctx, id, roles, ctx.models,
        [&](std::size_t i, const std::string& m) {
            return !values_by_layer(records, m, roles[i], field).empty();
        },
        [&](const std::string& m, const std::string& role) { return missing_reason(ctx, m, field, role); });
    out.push_back(
        {id, fmt::format("{} by layer and model", field),
         fmt::format(
             "{} with the base at each layer, one panel per role, one box per compared model: the "
             "distribution over the layer's attention heads (compare.csv head rows; roles without head "
             "blocks show the whole matrix as one point). Boxes: quartiles, median (thick line), 1.5 IQR "
             "whiskers, the heads as jittered points; the dotted line is the median agreement of "
             "unrelated bases ({}). Lower means a larger rotation of the singular vectors.",
             metric_label(field), chance_field(field)),
         svg.str()});
}

}  // namespace

void add_agreement_boxes(FigureContext& ctx, std::vector<Figure>& out) {
    for (const char* field : {"avg_l_agreement", "avg_r_agreement"}) agreement_figure(ctx, field, out);
}

}  // namespace diffract::report
