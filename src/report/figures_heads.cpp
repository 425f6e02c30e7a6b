// Per-head heatmaps (layers × heads): singular-vector agreement with the base (compare.csv head rows of
// one role) and update norms (heads.csv), one panel per model, plus difference panels (model minus
// reference) on a diverging scale.
#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

Grid subtract(const Grid& a, const Grid& b) {
    Grid out;
    for (const auto& [k, v] : a)
        if (auto it = b.find(k); it != b.end()) out[k] = v - it->second;
    return out;
}

// Compared models, with the reference last (the difference panels subtract it).
std::string reference_of(const FigureContext& ctx) {
    if (!ctx.config.reference.empty()) return ctx.config.reference;
    for (const auto& h : ctx.data.heads)
        if (!h.reference.empty()) return h.reference;
    return "";
}

void agreement_heatmap(FigureContext& ctx, std::vector<Figure>& out) {
    const auto& role = ctx.config.heatmap_role;
    const auto& field = ctx.config.agreement_field;
    std::map<std::string, Grid> grids;
    for (const auto& r : ctx.data.compare)
        if (r.head && r.layer && r.role == role && ctx.model_selected(r.model) && r.values.count(field) &&
            (ctx.selection.layers.empty() || ctx.selection.layers.count(*r.layer)))
            grids[r.model][{*r.layer, *r.head}] = r.value(field);
    const auto id = figure_id("heads-agreement", role);
    if (grids.empty()) {
        ctx.note(id, "", fmt::format("no compare.csv head rows of {} with {}", role, field));
        return;
    }
    const auto ref = reference_of(ctx);
    std::vector<HeatPanel> panels;
    for (const auto& m : ctx.models) {
        if (grids.count(m))
            panels.push_back({m, grids[m], false});
        else
            ctx.note(
                id, fmt::format("panel '{}'", m),
                ctx.is_compare_base(m)
                    ? fmt::format("'{}' is the base of the comparison (agreement is measured against it)", m)
                    : fmt::format("no compare.csv head rows of {} with {} for model '{}'", role, field, m));
    }
    if (grids.count(ref)) {
        for (const auto& m : ctx.models)
            if (m != ref && grids.count(m))
                panels.push_back({m + " − " + ref, subtract(grids[m], grids[ref]), true});
    } else if (!ref.empty()) {
        ctx.note(id, fmt::format("difference panels (model − '{}')", ref),
                 fmt::format("the reference '{}' has no head rows of {} with {}{}", ref, role, field,
                             ctx.model_selected(ref) ? "" : " among the selected models"));
    }
    out.push_back(heatmap_figure(
        id, fmt::format("Per-head agreement with the base ({})", role),
        fmt::format(
            "{} of each {} head block with the base model's, per layer (rows) and head (columns); lower "
            "means a larger rotation of the singular vectors, drawn yellow (as a larger update is in the "
            "update-norm figure). {} Hover a cell for layer, head and value.",
            metric_label(field), role,
            grids.count(ref) ? fmt::format("Difference panels: model minus the reference {} (red: the "
                                           "model rotated more; blue: the reference did).",
                                           ref)
                             : "No reference model: no difference panel."),
        "agreement", panels, true));
}

void update_norm_heatmap(FigureContext& ctx, std::vector<Figure>& out) {
    std::map<std::string, Grid> norms, importance;
    Grid ref_norms;
    std::string ref;
    for (const auto& h : ctx.data.heads) {
        if (!ctx.model_selected(h.model) ||
            (!ctx.selection.layers.empty() && !ctx.selection.layers.count(h.layer)))
            continue;
        norms[h.model][{h.layer, h.head}] = h.update_norm;
        importance[h.model][{h.layer, h.head}] = h.importance;
        if (!h.reference.empty() && std::isfinite(h.ref_update_norm)) {
            ref = h.reference;
            ref_norms[{h.layer, h.head}] = h.ref_update_norm;
        }
    }
    const std::string id = "heads-update-norm";
    if (norms.empty()) {
        ctx.note(id, "", "no heads.csv among the inputs (run `diffract compare`)");
        return;
    }
    std::vector<HeatPanel> panels;
    const bool ref_panel = !ref_norms.empty() && !norms.count(ref);
    for (const auto& m : ctx.models) {
        if (norms.count(m))
            panels.push_back({m, norms[m], false});
        else if (!(ref_panel && m == ref))
            ctx.note(
                id, fmt::format("panel '{}'", m),
                ctx.is_compare_base(m)
                    ? fmt::format("'{}' is the base of the comparison (update norms are measured from it)", m)
                    : fmt::format("heads.csv has no rows of model '{}'", m));
    }
    if (ref_panel) panels.push_back({ref + " (reference)", ref_norms, false});
    if (ref.empty())
        ctx.note(id, "difference panels (importance)",
                 "heads.csv names no reference model (compare --reference)");
    if (!ref.empty())
        for (const auto& m : ctx.models)
            if (importance.count(m)) panels.push_back({m + " − " + ref + " (scaled)", importance[m], true});
    out.push_back(heatmap_figure(
        id, "Per-head update norms",
        "Frobenius norm of each head's update ‖W − W_base‖_F over its Q, K, V and O blocks, per layer (rows) "
        "and head "
        "(columns); yellow: a larger update. Difference panels: the importance score, min–max-scaled norm of "
        "the model minus that of "
        "the "
        "reference (red: the head changed more for this domain). Hover a cell for layer, head and value.",
        "‖ΔW‖_F", panels, false));
}

}  // namespace

void add_head_heatmaps(FigureContext& ctx, std::vector<Figure>& out) {
    agreement_heatmap(ctx, out);
    update_norm_heatmap(ctx, out);
}

}  // namespace diffract::report
