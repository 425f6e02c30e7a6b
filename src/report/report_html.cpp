// The HTML page: everything inline (styles and SVG figures), no script and no external resource, so
// it opens offline in any browser; hover text comes from the SVG <title> elements.
#include <fmt/format.h>

#include "diffract/report/report.hpp"
#include "diffract/report/svg.hpp"

namespace diffract::report {
namespace {

constexpr const char* kStyle = R"css(
body { font-family: Helvetica, Arial, sans-serif; margin: 24px auto; padding: 0 12px; max-width: 1400px;
       box-sizing: border-box; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 32px; }
nav ol { columns: 2; font-size: 14px; }
figure { margin: 0 0 12px 0; } figcaption { font-size: 13px; color: #444; max-width: 1100px; margin-top: 4px; }
svg.figure { max-width: 100%; height: auto; border: 1px solid #eee; box-sizing: border-box; }
svg.figure rect.cell:hover, svg.figure circle:hover { stroke: #000; stroke-width: 1.5; }
.notes { font-size: 13px; color: #555; overflow-wrap: anywhere; } code { font-size: 12px; }
table.heads { border-collapse: collapse; font-size: 13px; margin: 4px 24px 12px 0; display: inline-table; }
table.heads th, table.heads td { padding: 2px 8px; text-align: right; border-bottom: 1px solid #eee; }
)css";

}  // namespace

std::string render_html(const std::vector<Figure>& figures, const std::vector<std::string>& notes,
                        const std::vector<std::string>& inputs, const std::string& title,
                        const std::vector<HeadScore>& heads, const std::string& precision,
                        const std::vector<ExpertScore>& experts) {
    std::string html = fmt::format(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
        "charset=\"utf-8\">\n<title>{}</title>\n<style>{}</style>\n"
        "</head>\n<body>\n<h1>{}</h1>\n",
        xml_escape(title), kStyle, xml_escape(title));
    html += "<p class=\"notes\">Inputs:";
    for (const auto& in : inputs) html += fmt::format(" <code>{}</code>", xml_escape(in));
    if (!precision.empty()) html += fmt::format(". Precision: {}", xml_escape(precision));
    html +=
        fmt::format(". {} figures. Hover a heatmap cell or a point for its values.</p>\n", figures.size());
    html += heads_table_html(heads);
    html += experts_table_html(experts);
    html += "<nav><ol>\n";
    for (const auto& f : figures)
        html += fmt::format("<li><a href=\"#{}\">{}</a></li>\n", f.id, xml_escape(f.title));
    html += "</ol></nav>\n";
    for (std::size_t i = 0; i < figures.size(); ++i) {
        const auto& f = figures[i];
        html += fmt::format(
            "<section id=\"{}\">\n<h2>Figure {}. {}</h2>\n<figure>\n{}<figcaption>{}</figcaption>\n"
            "</figure>\n</section>\n",
            f.id, i + 1, xml_escape(f.title), f.svg, xml_escape(f.caption));
    }
    if (!notes.empty()) {
        html += "<h2>Not shown</h2>\n<ul class=\"notes\">\n";
        for (const auto& n : notes) html += fmt::format("<li>{}</li>\n", xml_escape(n));
        html += "</ul>\n";
    }
    html += "</body>\n</html>\n";
    return html;
}

}  // namespace diffract::report
