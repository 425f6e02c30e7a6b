#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "diffract/analysis/fit_status.hpp"
#include "diffract/model/schema.hpp"
#include "figure_util_impl.hpp"

namespace diffract::report {

std::string metric_label(const std::string& field) {
    static const std::map<std::string, std::string> kLabels{
        {"pl_alpha", "power-law exponent α"},
        {"stable_rank", "stable rank ‖W‖²_F / ‖W‖²₂"},
        {"effective_rank", "effective rank"},
        {"l2_norm", "spectral norm ‖W‖₂"},
        {"frob_norm", "Frobenius norm ‖W‖_F"},
        {"pl_ks", "KS distance to power law"},
        {"mp_ks", "KS distance to Marchenko–Pastur"},
        {"delta_frob_norm", "update norm ‖ΔW‖_F"},
        {"rel_delta_frob_norm", "relative update ‖ΔW‖_F / ‖W‖_F"},
        {"avg_l_agreement", "mean left singular-vector agreement"},
        {"avg_r_agreement", "mean right singular-vector agreement"},
        {"avg_max_l_agreement", "row-max left agreement"},
    };
    const auto it = kLabels.find(field);
    return it == kLabels.end() ? field : fmt::format("{} ({})", field, it->second);
}

std::string fit_status_field(const std::string& field) {
    for (const char* fit : {"pl", "tpl", "expon", "mp"})
        if (field.starts_with(std::string(fit) + "_") && field != std::string(fit) + "_status")
            return std::string(fit) + "_status";
    return "";
}

namespace {

// Whether the fit behind `field` is flagged in `r` (a status other than ok; NaN: not analysed).
bool fit_flagged(const Record& r, const std::string& status_field) {
    if (status_field.empty()) return false;
    const double code = r.value(status_field);
    return !std::isnan(code) && code != static_cast<double>(analysis::FitStatus::ok);
}

// The selected rows with `field`, flagged fits included: analyze rows if any, else compare rows.
std::vector<const Record*> rows_with(const FigureContext& ctx, const std::string& field) {
    std::vector<const Record*> out;
    for (const auto* rows : {&ctx.data.metrics, &ctx.data.compare}) {
        for (const auto& r : *rows)
            if (ctx.selected(r) && r.values.count(field)) out.push_back(&r);
        if (!out.empty()) break;
    }
    return out;
}

}  // namespace

std::vector<const Record*> records_with(const FigureContext& ctx, const std::string& field) {
    const auto status = fit_status_field(field);
    std::vector<const Record*> out;
    for (const auto* r : rows_with(ctx, field))
        if (!fit_flagged(*r, status)) out.push_back(r);
    return out;
}

std::vector<const Record*> flagged_whole_records(const FigureContext& ctx, const std::string& field) {
    const auto status = fit_status_field(field);
    std::vector<const Record*> out;
    for (const auto* r : rows_with(ctx, field))
        if (!r->head && fit_flagged(*r, status) && std::isfinite(r->value(field))) out.push_back(r);
    return out;
}

std::string flag_tooltip(const Record& r, const std::string& field) {
    const auto status = fit_status_field(field);
    const std::string prefix = status.substr(0, status.size() - std::string("_status").size());
    const auto tail = r.values.find(prefix == "mp" ? "mp_n_bulk" : prefix + "_n_tail");
    return fmt::format(
        "{} · {}: {:.4g}, flagged {}{}", r.model, r.tensor, r.value(field),
        analysis::fit_status_name(r.value(status)),
        tail == r.values.end() || std::isnan(tail->second)
            ? ""
            : fmt::format(" ({} of {} points)", prefix == "mp" ? "bulk" : "tail", tail->second));
}

namespace {

// How many of `rows` are flagged by `status`, and "at_bound:alpha: 3, too_few: 2".
std::pair<int, std::string> flag_counts(const std::vector<const Record*>& rows, const std::string& status) {
    std::map<std::string, int> by_status;
    int flagged = 0;
    for (const auto* r : rows) {
        if (!fit_flagged(*r, status)) continue;
        ++flagged;
        ++by_status[std::string(analysis::fit_status_name(r->value(status)))];
    }
    std::string parts;
    for (const auto& [name, n] : by_status)
        parts += fmt::format("{}{}: {}", parts.empty() ? "" : ", ", name, n);
    return {flagged, parts};
}

}  // namespace

std::string flagged_fits_sentence(const FigureContext& ctx, const std::string& field,
                                  bool whole_drawn_hollow) {
    const auto status = fit_status_field(field);
    if (status.empty()) return "";
    const auto rows = rows_with(ctx, field);
    const auto [flagged, parts] = flag_counts(rows, status);
    if (flagged == 0) return "";
    return fmt::format(" {} of {} fits behind {} are flagged by {} ({}) and left out{}.", flagged,
                       rows.size(), field, status, parts,
                       whole_drawn_hollow
                           ? " of the curves; flagged whole matrices are drawn hollow (hover for "
                             "the status and the tail size)"
                           : "");
}

std::string missing_reason(const FigureContext& ctx, const std::string& model, const std::string& field,
                           const std::string& role, bool whole_only) {
    const auto all = rows_with(ctx, field);
    const bool from_compare = all.empty() || !all.front()->base.empty();
    std::vector<const Record*> of_model, mine;
    for (const auto* r : all) {
        if (r->model != model) continue;
        of_model.push_back(r);
        if ((role.empty() || r->role == role) && !(whole_only && r->head)) mine.push_back(r);
    }
    if (of_model.empty()) {
        if (from_compare && ctx.is_compare_base(model))
            return fmt::format("'{}' is the base of the comparison (nothing is measured against itself)",
                               model);
        return fmt::format("no {} row of model '{}' has {}", from_compare ? "compare.csv" : "metrics.csv",
                           model, field);
    }
    if (mine.empty())
        return fmt::format("no {}row of role {} has {}", whole_only ? "whole-matrix " : "", role, field);
    const auto status = fit_status_field(field);
    const auto [flagged, parts] = flag_counts(mine, status);
    if (flagged == static_cast<int>(mine.size()))
        return fmt::format("all {} fits behind {} are flagged by {} ({})", flagged, field, status, parts);
    return fmt::format("no finite {} value (NaN, or {} of {} fits flagged: {})", field, flagged, mine.size(),
                       parts.empty() ? "none" : parts);
}

void note_missing_models(FigureContext& ctx, const std::string& figure,
                         const std::vector<std::string>& panels, const std::vector<std::string>& models,
                         const std::function<bool(std::size_t, const std::string&)>& has,
                         const std::function<std::string(const std::string&, const std::string&)>& why) {
    for (const auto& m : models) {
        std::vector<std::size_t> missing;
        for (std::size_t i = 0; i < panels.size(); ++i)
            if (!has(i, m)) missing.push_back(i);
        if (missing.empty()) continue;
        if (missing.size() == panels.size() && panels.size() > 1) {
            ctx.note(figure, fmt::format("model '{}' (every panel)", m), why(m, ""));
            continue;
        }
        for (auto i : missing)
            ctx.note(figure, fmt::format("panel '{}', model '{}'", panels[i], m), why(m, panels[i]));
    }
}

void note_missing_roles(FigureContext& ctx, const std::string& figure,
                        const std::vector<std::string>& present, const std::string& what) {
    for (auto role : ctx.selection.roles) {
        const std::string name(model::role_name(role));
        if (std::find(present.begin(), present.end(), name) == present.end())
            ctx.note(figure, fmt::format("panel '{}'", name), fmt::format("no {} of role {}", what, name));
    }
}

std::vector<std::string> roles_of(const FigureContext& ctx, const std::vector<const Record*>& records,
                                  bool layerless) {
    std::vector<std::string> names;
    for (const auto* r : records)
        if (r->layer || (layerless && !r->head)) names.push_back(r->role);
    return roles_of(ctx, names);
}

std::vector<std::string> roles_of(const FigureContext&, const std::vector<std::string>& role_names) {
    std::set<model::Role> present;
    for (const auto& name : role_names)
        if (auto role = model::role_from_name(name)) present.insert(*role);
    std::vector<std::string> out;
    for (auto role : present) out.emplace_back(model::role_name(role));
    return out;
}

std::map<int, std::vector<double>> values_by_layer(const std::vector<const Record*>& records,
                                                   const std::string& model, const std::string& role,
                                                   const std::string& field) {
    std::map<int, std::vector<double>> heads, whole;
    for (const auto* r : records) {
        if (r->model != model || r->role != role || !r->layer) continue;
        (r->head ? heads : whole)[*r->layer].push_back(r->value(field));
    }
    return heads.empty() ? whole : heads;
}

void whole_values(const std::vector<const Record*>& records, const std::string& model,
                  const std::string& role, const std::string& field, std::vector<double>& values,
                  std::vector<std::string>& tooltips) {
    for (const auto* r : records) {
        if (r->model != model || r->role != role || r->head) continue;
        values.push_back(r->value(field));
        tooltips.push_back(fmt::format("{} · {}: {:.4g}", model, r->tensor, r->value(field)));
    }
}

std::string figure_id(const std::string& a, const std::string& b) {
    std::string id = b.empty() ? a : a + "-" + b;
    for (auto& c : id) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
    }
    return id;
}

FigureContext::FigureContext(const ReportData& d, const ReportConfig& c)
    : data(d),
      config(c),
      selection(analysis::make_selection({c.roles, c.layers, "", "", "", ""})),
      models(c.models.empty() ? d.models : c.models),
      colours(c.colours) {
    // Models take their colours in report order, whichever figure asks first.
    for (const auto& m : models) colours(m);
}

bool FigureContext::model_selected(const std::string& model) const {
    return std::find(models.begin(), models.end(), model) != models.end();
}

bool FigureContext::layer_selected(std::optional<int> layer) const {
    return selection.layers.empty() || (layer && selection.layers.count(*layer));
}

bool FigureContext::is_compare_base(const std::string& model) const {
    return std::any_of(data.compare.begin(), data.compare.end(),
                       [&](const Record& r) { return r.base == model; });
}

void FigureContext::note(const std::string& figure, const std::string& panel, const std::string& why) {
    notes.push_back(panel.empty() ? fmt::format("{}: {}", figure, why)
                                  : fmt::format("{}: {} — {}", figure, panel, why));
}

bool FigureContext::role_selected(const std::string& name) const {
    if (selection.roles.empty()) return true;
    const auto role = model::role_from_name(name);
    return role && selection.roles.count(*role);
}

bool FigureContext::selected(const Record& r) const {
    return model_selected(r.model) && role_selected(r.role) && layer_selected(r.layer);
}

}  // namespace diffract::report
