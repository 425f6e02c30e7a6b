// The report's figures, one function per kind. Each appends the figures it can draw from the data
// to `out`, and a note to `ctx.notes` for what it cannot (missing inputs are skipped, not errors).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/selection.hpp"
#include "diffract/report/config.hpp"
#include "diffract/report/data.hpp"
#include "diffract/report/palette.hpp"

namespace diffract::report {

struct Figure {
    std::string id;  // file name stem and HTML anchor
    std::string title;
    std::string caption;  // what is drawn, axes, marks
    std::string svg;      // a complete <svg class="figure"> document
};

struct FigureContext {
    const ReportData& data;
    const ReportConfig& config;
    analysis::Selection selection;    // roles and layers
    std::vector<std::string> models;  // selected, in order
    ColourAssigner colours;
    std::vector<std::string> notes;

    FigureContext(const ReportData& d, const ReportConfig& c);
    bool selected(const Record& r) const;  // model, role and layer selected
    bool model_selected(const std::string& model) const;
    bool layer_selected(std::optional<int> layer) const;
    bool role_selected(const std::string& role) const;
    bool is_compare_base(const std::string& model) const;  // a base named by compare rows
    // A "Not shown" line: "FIGURE: PANEL — WHY" (PANEL as the caller words it: "panel 'attn_q'").
    void note(const std::string& figure, const std::string& panel, const std::string& why);
};

// Per-head agreement and update-norm heatmaps (layers × heads, one panel per model, difference panels).
void add_head_heatmaps(FigureContext& ctx, std::vector<Figure>& out);
// A mixture of experts' atlas (experts.csv, expert_overlap.csv): layer × expert heatmaps of the update
// norms and importance, and of the router drift; the expert × expert overlap maps of one layer
// (config.overlap_layer, else the layer whose mean overlap changed most), read and write. Nothing for a
// dense model. InputError when overlap_layer names a layer the overlaps do not have.
void add_expert_atlas(FigureContext& ctx, std::vector<Figure>& out);
// Layer-wise curves of each metric: mean, median and ±1 std across heads, per role, models overlaid.
void add_layer_curves(FigureContext& ctx, std::vector<Figure>& out);
// Box plots with jittered points of each metric per role across models.
void add_role_boxes(FigureContext& ctx, std::vector<Figure>& out);
// Scatter of two metrics across matrices, coloured by role and by model.
void add_metric_scatter(FigureContext& ctx, std::vector<Figure>& out);
// ESD histogram of one matrix with its Marchenko–Pastur density and power-law tail (needs a store).
void add_esd(FigureContext& ctx, std::vector<Figure>& out);
// Sweep curves: rewind, interpolation trade-off, SVD truncation.
void add_sweeps(FigureContext& ctx, std::vector<Figure>& out);
// Single-head rewinds (rewind-each) and ranking validations (sweep validate).
void add_head_effects(FigureContext& ctx, std::vector<Figure>& out);
// Evolution over a training series: metric against step per role, box plots per checkpoint.
void add_evolution(FigureContext& ctx, std::vector<Figure>& out);
// A watched run (tables with a step column): metric against step per layer with its alerts, and head
// importance as a heatmap over steps.
void add_trajectories(FigureContext& ctx, std::vector<Figure>& out);

// The spectrum of each update ΔW = W_model − W_base (store field delta_svals): per compared model,
// σ_i/σ_1 and the cumulative energy against the fraction of components, one panel per role, one
// line per layer.
void add_delta_spectra(FigureContext& ctx, std::vector<Figure>& out);
// Singular-vector agreement with the base by layer: box plots per role and layer, one per model.
void add_agreement_boxes(FigureContext& ctx, std::vector<Figure>& out);

// Every figure, in report order.
std::vector<Figure> build_figures(FigureContext& ctx);

}  // namespace diffract::report
