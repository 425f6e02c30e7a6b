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

std::string flagged_fits_sentence(const FigureContext& ctx, const std::string& field) {
    const auto status = fit_status_field(field);
    if (status.empty()) return "";
    std::map<std::string, int> by_status;
    int total = 0, flagged = 0;
    for (const auto* r : rows_with(ctx, field)) {
        ++total;
        if (!fit_flagged(*r, status)) continue;
        ++flagged;
        ++by_status[std::string(analysis::fit_status_name(r->value(status)))];
    }
    if (flagged == 0) return "";
    std::string parts;
    for (const auto& [name, n] : by_status)
        parts += fmt::format("{}{}: {}", parts.empty() ? "" : ", ", name, n);
    return fmt::format(" {} of {} fits behind {} are flagged by {} ({}) and left out.", flagged, total, field,
                       status, parts);
}

std::vector<std::string> roles_of(const FigureContext& ctx, const std::vector<const Record*>& records) {
    std::set<model::Role> present;
    for (const auto* r : records)
        if (r->layer)
            if (auto role = model::role_from_name(r->role)) present.insert(*role);
    std::vector<std::string> out;
    if (ctx.config.roles.empty()) {
        for (auto role : {model::Role::attn_q, model::Role::attn_v, model::Role::mlp_down})
            if (present.count(role)) out.emplace_back(model::role_name(role));
        if (!out.empty()) return out;
    }
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
      selection(analysis::make_selection(c.roles, c.layers, "", "")),
      models(c.models.empty() ? d.models : c.models),
      colours(c.colours) {}

bool FigureContext::model_selected(const std::string& model) const {
    return std::find(models.begin(), models.end(), model) != models.end();
}

bool FigureContext::selected(const Record& r) const {
    if (!model_selected(r.model)) return false;
    if (!selection.roles.empty()) {
        const auto role = model::role_from_name(r.role);
        if (!role || !selection.roles.count(*role)) return false;
    }
    return selection.layers.empty() || (r.layer && selection.layers.count(*r.layer));
}

}  // namespace diffract::report
