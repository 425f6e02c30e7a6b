// The report's figures, one function per kind. Each appends the figures it can draw from the data
// to `out`, and a note to `ctx.notes` for what it cannot (missing inputs are skipped, not errors).
#pragma once

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
};

// Per-head agreement and update-norm heatmaps (layers × heads, one panel per model, difference panels).
void add_head_heatmaps(FigureContext& ctx, std::vector<Figure>& out);
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
// Evolution over a training series: metric against step per role, box plots per checkpoint.
void add_evolution(FigureContext& ctx, std::vector<Figure>& out);

// Every figure, in report order.
std::vector<Figure> build_figures(FigureContext& ctx);

}  // namespace diffract::report
