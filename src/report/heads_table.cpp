// The report's first table: per model, the heads whose update stands out most and least.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "diffract/report/report.hpp"
#include "diffract/report/svg.hpp"

namespace diffract::report {

std::string heads_table_html(const std::vector<HeadScore>& heads, std::size_t k) {
    std::map<std::string, std::vector<const HeadScore*>> by_model;
    for (const auto& h : heads)
        if (!std::isnan(h.importance)) by_model[h.model].push_back(&h);
    if (by_model.empty()) return {};
    std::string html =
        "<h2>Heads that changed most and least</h2>\n<p class=\"notes\">By importance: the head's update "
        "norm "
        "scaled against the reference model's (heads.csv). High: the update that continued pre-training made "
        "beyond the reference's drift; low: the first heads a rewind puts back.</p>\n";
    for (auto& entry : by_model) {
        // Named, not a structured binding: clang 14 (the fuzz build) cannot capture one in the lambda.
        const std::string& model = entry.first;
        auto& rows = entry.second;
        std::sort(rows.begin(), rows.end(), [](const HeadScore* a, const HeadScore* b) {
            return a->importance != b->importance
                       ? a->importance > b->importance
                       : std::pair(a->layer, a->head) < std::pair(b->layer, b->head);
        });
        auto table = [&](const char* what, auto first, auto last) {
            std::string t = fmt::format(
                "<table class=\"heads\"><caption>{} — {}</caption>\n<tr><th>#</th><th>layer:head</th>"
                "<th>importance</th><th>update norm</th><th>reference update norm</th></tr>\n",
                xml_escape(model), what);
            std::size_t n = 0;
            for (auto it = first; it != last; ++it) {
                const auto* h = *it;
                t += fmt::format(
                    "<tr><td>{}</td><td>{}:{}</td><td>{:.3f}</td><td>{:.4g}</td><td>{:.4g}</td></tr>\n", ++n,
                    h->layer, h->head, h->importance, h->update_norm, h->ref_update_norm);
            }
            return t + "</table>\n";
        };
        const auto n = std::min(k, rows.size());
        html += "<div>\n" +
                table("changed most", rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(n)) +
                table("changed least", rows.rbegin(), rows.rbegin() + static_cast<std::ptrdiff_t>(n)) +
                "</div>\n";
    }
    return html;
}

}  // namespace diffract::report
