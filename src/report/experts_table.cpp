// The page's experts table (a mixture of experts): per model, the routed experts whose update stands out
// most and least, then the shared experts apart.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "diffract/report/report.hpp"
#include "diffract/report/svg.hpp"

namespace diffract::report {
namespace {

constexpr const char* kHeader =
    "<tr><th>#</th><th>layer:expert</th><th>importance</th><th>update norm</th><th>reference update "
    "norm</th><th>router angle (°)</th><th>stands out</th></tr>\n";

std::string row_html(std::size_t n, const std::string& unit, const ExpertScore& e) {
    return fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.4g}</td><td>{:.4g}</td><td>{:.3g}</td><td>{}</td></"
        "tr>\n",
        n, unit, e.importance, e.update_norm, e.ref_update_norm, e.router_angle, e.stands_out ? "yes" : "");
}

}  // namespace

std::string experts_table_html(const std::vector<ExpertScore>& experts, std::size_t k) {
    std::map<std::string, std::vector<const ExpertScore*>> routed, shared;
    for (const auto& e : experts) (e.expert ? routed : shared)[e.model].push_back(&e);
    if (routed.empty() && shared.empty()) return {};
    std::string html =
        "<h2>Experts that changed most and least</h2>\n<p class=\"notes\">Routed experts by importance: the "
        "expert's update norm scaled against the reference model's (experts.csv; by the update norm itself "
        "without a reference). Shared experts, always active, are listed apart. The expert atlas figures "
        "draw every expert.</p>\n";
    for (auto& entry : routed) {
        const std::string& model = entry.first;  // named: clang 14 cannot capture a structured binding
        auto& rows = entry.second;
        // With a reference, importance (the scaled update beyond the reference's); without one, the update
        // norm itself, as the atlas' heatmap.
        const bool by_importance = std::any_of(rows.begin(), rows.end(), [](const ExpertScore* e) {
            return !e->reference.empty() && std::isfinite(e->importance);
        });
        const auto key = [by_importance](const ExpertScore* e) {
            const double v = by_importance ? e->importance : e->update_norm;
            return std::isnan(v) ? -INFINITY : v;
        };
        std::sort(rows.begin(), rows.end(), [&](const ExpertScore* a, const ExpertScore* b) {
            return key(a) != key(b) ? key(a) > key(b)
                                    : std::pair(a->layer, *a->expert) < std::pair(b->layer, *b->expert);
        });
        auto table = [&](const char* what, auto first, auto last) {
            std::string t =
                fmt::format("<table class=\"heads experts\"><caption>{} — {} (by {})</caption>\n{}",
                            xml_escape(model), what, by_importance ? "importance" : "update norm", kHeader);
            std::size_t n = 0;
            for (auto it = first; it != last; ++it)
                t += row_html(++n, fmt::format("{}:{}", (*it)->layer, *(*it)->expert), **it);
            return t + "</table>\n";
        };
        const auto n = static_cast<std::ptrdiff_t>(std::min(k, rows.size()));
        html += "<div>\n" + table("changed most", rows.begin(), rows.begin() + n) +
                table("changed least", rows.rbegin(), rows.rbegin() + n) + "</div>\n";
    }
    for (auto& [model, rows] : shared) {
        std::sort(rows.begin(), rows.end(),
                  [](const ExpertScore* a, const ExpertScore* b) { return a->layer < b->layer; });
        std::string t = fmt::format(
            "<div>\n<table class=\"heads experts shared\"><caption>{} — shared experts, by "
            "layer</caption>\n{}",
            xml_escape(model), kHeader);
        std::size_t n = 0;
        for (const auto* e : rows) t += row_html(++n, fmt::format("{}:shared", e->layer), *e);
        html += t + "</table>\n</div>\n";
    }
    return html;
}

}  // namespace diffract::report
