// Helpers shared by the figure files: metric labels, record lookup, role ordering, grouping.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "diffract/report/figures.hpp"
#include "diffract/report/plot.hpp"

namespace diffract::report {

// "pl_alpha" → "pl_alpha (power-law exponent α)"; unknown fields unchanged.
std::string metric_label(const std::string& field);

// The selected records carrying `field`: analyze rows if any has it, else compare rows. A record
// whose fit behind `field` is flagged (its pl_/tpl_/expon_/mp_status is not ok) is left out.
std::vector<const Record*> records_with(const FigureContext& ctx, const std::string& field);

// The status field of the fit that `field` comes from ("pl_status" for pl_alpha), "" for none.
std::string fit_status_field(const std::string& field);

// The selected whole-matrix records whose fit behind `field` is flagged but whose value is finite (a
// too_few fit keeps its values): figures draw them hollow, outside means and bands.
std::vector<const Record*> flagged_whole_records(const FigureContext& ctx, const std::string& field);

// "MODEL · TENSOR: VALUE, flagged too_few (tail of N points)": a hollow marker's tooltip.
std::string flag_tooltip(const Record& r, const std::string& field);

// " N of M fits behind FIELD are flagged (at_bound:alpha: a, ...) and left out." for the selected
// records (the caption's sentence); "" when none is flagged. `whole_drawn_hollow`: the figure draws
// flagged whole matrices hollow (flagged_whole_records), and the sentence says so.
std::string flagged_fits_sentence(const FigureContext& ctx, const std::string& field,
                                  bool whole_drawn_hollow = false);

// Why `model` has no `field` values (in `role` when given; whole matrices only when `whole_only`):
// it is the base of the comparison, no row of it carries the field, every fit behind the field is
// flagged, or it has no rows of that role.
std::string missing_reason(const FigureContext& ctx, const std::string& model, const std::string& field,
                           const std::string& role = "", bool whole_only = false);

// Notes the models that lack data in a figure's panels: one line for a model missing from every
// panel ("FIG: model 'M' (every panel) — WHY"), else one per panel ("FIG: panel 'P', model 'M' — WHY").
// has(i, model): panel i shows the model; why(model, panel): the reason.
void note_missing_models(FigureContext& ctx, const std::string& figure,
                         const std::vector<std::string>& panels, const std::vector<std::string>& models,
                         const std::function<bool(std::size_t, const std::string&)>& has,
                         const std::function<std::string(const std::string&, const std::string&)>& why);

// Notes every role asked for with --roles that has no panel because `present` lacks it.
void note_missing_roles(FigureContext& ctx, const std::string& figure,
                        const std::vector<std::string>& present, const std::string& what);

// Roles among `records` (matrices with a layer; with `layerless`, also whole matrices without one:
// embeddings, lm_head), in model::Role order: every role present (the records are the selection's), so
// that no fitted matrix is left out of the figures.
std::vector<std::string> roles_of(const FigureContext& ctx, const std::vector<const Record*>& records,
                                  bool layerless = false);
// The same rule over role names (of matrices with a layer).
std::vector<std::string> roles_of(const FigureContext& ctx, const std::vector<std::string>& role_names);

// Values of `field` grouped by layer: head rows when the role has any, else the whole matrices.
std::map<int, std::vector<double>> values_by_layer(const std::vector<const Record*>& records,
                                                   const std::string& model, const std::string& role,
                                                   const std::string& field);

// Whole-matrix values of one model and role, with "tensor: value" tooltips.
void whole_values(const std::vector<const Record*>& records, const std::string& model,
                  const std::string& role, const std::string& field, std::vector<double>& values,
                  std::vector<std::string>& tooltips);

// Box plots of `field` per role, one box per category (model name), in the given order; notes the
// categories missing from a panel.
Figure role_boxes(FigureContext& ctx, const std::string& field, const std::vector<std::string>& categories,
                  const std::string& id, const std::string& x_label);

// Heatmap cells: (row, column) → value, e.g. (layer, head), (layer, expert), (expert, expert).
using Grid = std::map<std::pair<int, int>, double>;
struct HeatPanel {
    std::string title;
    Grid cells;
    bool difference = false;  // drawn on the diverging scale, below the plain panels
};
struct HeatAxes {
    std::string rows = "layer", columns = "head";  // the axes' titles, and the hover text's names
};
// One figure of heatmap panels over the union of their rows and columns: the plain panels on the first
// row on one sequential scale, the difference panels below on one diverging scale, each scale with its
// colour bar (heatmap_figure.cpp). One colour meaning across the figures: yellow (sequential) and red
// (difference) mean "changed more"; `low_means_change`: the values fall as the unit changes (agreement),
// so both maps run reversed. Each cell's hover text: "PANEL · ROWS r, COLUMNS c: value".
Figure heatmap_figure(const std::string& id, const std::string& title, const std::string& caption,
                      const std::string& value_label, const std::vector<HeatPanel>& panels,
                      bool low_means_change, const HeatAxes& axes = {});

// A figure id from parts: lowercase, [a-z0-9_-] only.
std::string figure_id(const std::string& a, const std::string& b = "");

}  // namespace diffract::report
