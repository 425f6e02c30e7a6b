// The expert atlas of a mixture of experts (experts.csv, expert_overlap.csv; docs/report.md): per model a
// layer × expert heatmap of the update norms with the importance below it (as the heads' figure), the
// router drift beside it, and the overlap maps (expert × expert) of one layer, read and write subspaces,
// in the base and each model. Routed experts only: the shared experts have no index (the page's experts
// table lists them apart). A dense model has no experts.csv and so no atlas (and no note).
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

const HeatAxes kLayerByExpert{"layer", "expert"};
const HeatAxes kExpertByExpert{"expert", "expert"};

bool drawn(const FigureContext& ctx, const ExpertScore& e) {
    return e.expert && e.kind == model::ExpertKind::routed && ctx.model_selected(e.model) &&
           ctx.layer_selected(e.layer);
}

void importance_heatmap(FigureContext& ctx, std::vector<Figure>& out) {
    std::map<std::string, Grid> norms, importance;
    std::string ref;
    for (const auto& e : ctx.data.experts) {
        if (!drawn(ctx, e)) continue;
        norms[e.model][{e.layer, *e.expert}] = e.update_norm;
        if (!e.reference.empty() && std::isfinite(e.importance)) {
            ref = e.reference;
            importance[e.model][{e.layer, *e.expert}] = e.importance;
        }
    }
    if (norms.empty()) return;
    const std::string id = "experts-importance";
    std::vector<HeatPanel> panels;
    for (const auto& m : ctx.models)
        if (norms.count(m)) panels.push_back({m, norms[m], false});
    if (ref.empty())
        ctx.note(id, "difference panels (importance)",
                 "experts.csv names no reference model (compare --reference)");
    for (const auto& m : ctx.models)
        if (importance.count(m)) panels.push_back({m + " − " + ref + " (scaled)", importance[m], true});
    out.push_back(heatmap_figure(
        id, "Expert atlas: per-expert update norms and importance",
        fmt::format(
            "Frobenius norm of each routed expert's update ‖W − W_base‖_F over its gate, up and down "
            "matrices, per layer (rows) and expert (columns); yellow: a larger update. {} The router's "
            "drift is the next figure, the shared experts are in the experts table. Hover a cell for "
            "layer, expert and value.",
            ref.empty() ? std::string("No reference model: no importance panel (compare --reference).")
                        : fmt::format("Difference panels: the importance score, min–max-scaled update "
                                      "norm of the model minus that of the reference {} (red: the "
                                      "expert changed more for this domain).",
                                      ref)),
        "‖ΔW‖_F", panels, false, kLayerByExpert));
}

void router_heatmap(FigureContext& ctx, std::vector<Figure>& out) {
    std::map<std::string, Grid> drift;
    bool any = false;
    for (const auto& e : ctx.data.experts) {
        if (!drawn(ctx, e)) continue;
        any = true;
        if (std::isfinite(e.router_angle)) drift[e.model][{e.layer, *e.expert}] = e.router_angle;
    }
    const std::string id = "experts-router-drift";
    if (!any) return;
    if (drift.empty()) {
        ctx.note(id, "", "experts.csv has no router_angle_degrees (no router among the compared tensors)");
        return;
    }
    std::vector<HeatPanel> panels;
    for (const auto& m : ctx.models)
        if (drift.count(m)) panels.push_back({m, drift[m], false});
    out.push_back(heatmap_figure(
        id, "Expert atlas: router drift",
        "The angle between each routed expert's router row in the model and in the base (degrees), per layer "
        "(rows) and expert (columns), beside the update norms of the previous figure: an expert whose router "
        "row turned is routed other tokens. Yellow: a larger turn. Hover a cell for layer, expert and value.",
        "angle (°)", panels, false, kLayerByExpert));
}

// The layer of the overlap maps: --overlap-layer, else the one whose mean overlap changed most (the
// largest |mean of overlap − overlap_base| over its pairs, both sides and every selected model).
struct ChosenLayer {
    int layer = 0;
    double mean_change = 0;
    bool given = false;
};

std::optional<ChosenLayer> overlap_layer(FigureContext& ctx) {
    std::map<int, std::pair<double, int>> change;  // layer → (sum, count) of finite changes
    for (const auto& p : ctx.data.expert_pairs) {
        if (!ctx.model_selected(p.model) || !ctx.layer_selected(p.layer)) continue;
        auto& c = change[p.layer];
        if (std::isfinite(p.overlap - p.overlap_base)) c.first += p.overlap - p.overlap_base, ++c.second;
    }
    if (change.empty()) return std::nullopt;
    const auto mean = [&](int layer) {
        const auto& c = change[layer];
        return c.second ? c.first / c.second : 0.0;
    };
    if (const auto& given = ctx.config.overlap_layer) {
        if (!change.count(*given))
            throw InputError(
                fmt::format("--overlap-layer: expert_overlap.csv has no selected rows of layer {} "
                            "(layers {} to {})",
                            *given, change.begin()->first, change.rbegin()->first));
        return ChosenLayer{*given, mean(*given), true};
    }
    ChosenLayer best{change.begin()->first, mean(change.begin()->first), false};
    for (const auto& [layer, c] : change)
        if (std::abs(mean(layer)) > std::abs(best.mean_change)) best = {layer, mean(layer), false};
    return best;
}

void overlap_maps(FigureContext& ctx, std::vector<Figure>& out) {
    const auto chosen = overlap_layer(ctx);
    if (!chosen) {
        const bool experts = std::any_of(ctx.data.experts.begin(), ctx.data.experts.end(),
                                         [&](const ExpertScore& e) { return drawn(ctx, e); });
        if (experts)
            ctx.note("experts-overlap", "",
                     "no expert_overlap.csv rows of the selected models and layers among the inputs (compare "
                     "writes it for a mixture of experts unless --overlap-k 0)");
        return;
    }
    for (const auto side : {analysis::SubspaceSide::read, analysis::SubspaceSide::write}) {
        const std::string side_name(name_of(analysis::kSubspaceSideNames, side));
        std::map<std::string, Grid> model, change;
        Grid base;
        for (const auto& p : ctx.data.expert_pairs) {
            if (p.layer != chosen->layer || p.side != side || !ctx.model_selected(p.model)) continue;
            for (const auto& cell : {std::pair(p.expert_a, p.expert_b), std::pair(p.expert_b, p.expert_a)}) {
                base[cell] = p.overlap_base;  // the same base for every model of one compare
                model[p.model][cell] = p.overlap;
                change[p.model][cell] = p.overlap - p.overlap_base;
            }
        }
        const auto id = figure_id("experts-overlap", side_name);
        if (model.empty()) {
            ctx.note(id, "",
                     fmt::format("expert_overlap.csv has no {} rows of layer {}", side_name, chosen->layer));
            continue;
        }
        std::vector<HeatPanel> panels{{"base", base, false}};
        for (const auto& m : ctx.models)
            if (model.count(m)) panels.push_back({m, model[m], false});
        for (const auto& m : ctx.models)
            if (change.count(m)) panels.push_back({m + " − base", change[m], true});
        out.push_back(heatmap_figure(
            id, fmt::format("Expert atlas: overlap of the {} subspaces, layer {}", side_name, chosen->layer),
            fmt::format(
                "The overlap ‖AᵀB‖²_F / k of two routed experts' top-k {} (mean squared cosine of "
                "their principal angles; 1: the same subspace, k/hidden: chance) in layer {}, in the "
                "base and in each model, expert by expert (the diagonal is blank). Difference panels: "
                "the model's minus the base's (red: the experts became more alike). {} Hover a cell for "
                "the pair and its overlap; expert_overlap.csv has every layer and the chance floor.",
                side == analysis::SubspaceSide::read
                    ? "read subspaces (right singular vectors of gate and up: the hidden directions "
                      "they read)"
                    : "write subspaces (left singular vectors of down: the hidden directions they "
                      "write)",
                chosen->layer,
                chosen->given ? fmt::format("Layer {} as --overlap-layer asked.", chosen->layer)
                              : fmt::format("Layer {} is the layer whose mean overlap changed most "
                                            "(mean change {:+.4f} over its pairs, both sides and "
                                            "every model; --overlap-layer picks another).",
                                            chosen->layer, chosen->mean_change)),
            "overlap", panels, false, kExpertByExpert));
    }
}

}  // namespace

void add_expert_atlas(FigureContext& ctx, std::vector<Figure>& out) {
    importance_heatmap(ctx, out);
    router_heatmap(ctx, out);
    overlap_maps(ctx, out);
}

}  // namespace diffract::report
