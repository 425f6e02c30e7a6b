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

// " N of M fits behind FIELD are flagged (at_bound:alpha: a, ...) and left out." for the selected
// records (the caption's sentence); "" when none is flagged.
std::string flagged_fits_sentence(const FigureContext& ctx, const std::string& field);

// Roles among `records` (whole matrices with a layer), in model::Role order; limited to the
// selection, or by default to attn_q, attn_v, mlp_down when present (the paper's W_Q, W_V, W_FC2).
std::vector<std::string> roles_of(const FigureContext& ctx, const std::vector<const Record*>& records);

// Values of `field` grouped by layer: head rows when the role has any, else the whole matrices.
std::map<int, std::vector<double>> values_by_layer(const std::vector<const Record*>& records,
                                                   const std::string& model, const std::string& role,
                                                   const std::string& field);

// Whole-matrix values of one model and role, with "tensor: value" tooltips.
void whole_values(const std::vector<const Record*>& records, const std::string& model,
                  const std::string& role, const std::string& field, std::vector<double>& values,
                  std::vector<std::string>& tooltips);

// Box plots of `field` per role, one box per category (model name), in the given order.
Figure role_boxes(FigureContext& ctx, const std::string& field, const std::vector<std::string>& categories,
                  const std::string& id, const std::string& x_label);

// A figure id from parts: lowercase, [a-z0-9_-] only.
std::string figure_id(const std::string& a, const std::string& b = "");

}  // namespace diffract::report
