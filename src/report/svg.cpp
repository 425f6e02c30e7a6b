#include "diffract/report/svg.hpp"

#include <cmath>

#include <fmt/format.h>

namespace diffract::report {

std::string xml_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::string svg_num(double v) {
    if (!std::isfinite(v)) return "0";
    std::string s = fmt::format("{:.2f}", v);
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s == "-0" ? "0" : s;
}

Svg::Svg(double width, double height, std::string css_class, std::string label)
    : width_(width), height_(height), class_(std::move(css_class)), label_(std::move(label)) {}

void Svg::element(std::string_view name, const Attrs& attrs, std::string_view tooltip) {
    body_ += fmt::format("<{}", name);
    for (const auto& [k, v] : attrs) body_ += fmt::format(" {}=\"{}\"", k, xml_escape(v));
    if (tooltip.empty()) {
        body_ += "/>\n";
    } else {
        body_ += fmt::format("><title>{}</title></{}>\n", xml_escape(tooltip), name);
    }
}

void Svg::rect(double x, double y, double w, double h, std::string_view fill, std::string_view tooltip,
               const Attrs& extra) {
    Attrs a{{"x", svg_num(x)},
            {"y", svg_num(y)},
            {"width", svg_num(std::max(w, 0.0))},
            {"height", svg_num(std::max(h, 0.0))},
            {"fill", std::string(fill)}};
    a.insert(a.end(), extra.begin(), extra.end());
    element("rect", a, tooltip);
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
               std::string_view dash) {
    Attrs a{{"x1", svg_num(x1)},
            {"y1", svg_num(y1)},
            {"x2", svg_num(x2)},
            {"y2", svg_num(y2)},
            {"stroke", std::string(stroke)},
            {"stroke-width", svg_num(width)}};
    if (!dash.empty()) a.emplace_back("stroke-dasharray", std::string(dash));
    element("line", a);
}

namespace {
std::string points_attr(const std::vector<std::pair<double, double>>& pts) {
    std::string s;
    for (const auto& [x, y] : pts) s += fmt::format("{}{},{}", s.empty() ? "" : " ", svg_num(x), svg_num(y));
    return s;
}
}  // namespace

void Svg::polyline(const std::vector<std::pair<double, double>>& pts, std::string_view stroke, double width,
                   std::string_view dash, std::string_view tooltip) {
    if (pts.empty()) return;
    Attrs a{{"points", points_attr(pts)},
            {"fill", "none"},
            {"stroke", std::string(stroke)},
            {"stroke-width", svg_num(width)},
            {"stroke-linejoin", "round"}};
    if (!dash.empty()) a.emplace_back("stroke-dasharray", std::string(dash));
    element("polyline", a, tooltip);
}

void Svg::polygon(const std::vector<std::pair<double, double>>& pts, std::string_view fill, double opacity) {
    if (pts.empty()) return;
    element("polygon", {{"points", points_attr(pts)},
                        {"fill", std::string(fill)},
                        {"fill-opacity", svg_num(opacity)},
                        {"stroke", "none"}});
}

void Svg::circle(double cx, double cy, double r, std::string_view fill, std::string_view tooltip,
                 double opacity) {
    element("circle",
            {{"cx", svg_num(cx)},
             {"cy", svg_num(cy)},
             {"r", svg_num(r)},
             {"fill", std::string(fill)},
             {"fill-opacity", svg_num(opacity)}},
            tooltip);
}

void Svg::ring(double cx, double cy, double r, std::string_view stroke, std::string_view tooltip) {
    element("circle",
            {{"cx", svg_num(cx)},
             {"cy", svg_num(cy)},
             {"r", svg_num(r)},
             {"fill", "#ffffff"},
             {"stroke", std::string(stroke)},
             {"stroke-width", "1.5"}},
            tooltip);
}

void Svg::text(double x, double y, std::string_view s, double size, std::string_view anchor, double rotate,
               std::string_view weight) {
    std::string t = fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{}\"", svg_num(x),
                                svg_num(y), svg_num(size), anchor);
    if (weight != "normal") t += fmt::format(" font-weight=\"{}\"", weight);
    if (rotate != 0)
        t += fmt::format(" transform=\"rotate({} {} {})\"", svg_num(rotate), svg_num(x), svg_num(y));
    body_ += t + ">" + xml_escape(s) + "</text>\n";
}

void Svg::begin_group(const Attrs& attrs) {
    body_ += "<g";
    for (const auto& [k, v] : attrs) body_ += fmt::format(" {}=\"{}\"", k, xml_escape(v));
    body_ += ">\n";
}

void Svg::end_group() { body_ += "</g>\n"; }

std::string Svg::str() const {
    std::string head = fmt::format(
        "<svg class=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} "
        "{}\" "
        "font-family=\"Helvetica, Arial, sans-serif\" role=\"img\"",
        xml_escape(class_), svg_num(width_), svg_num(height_), svg_num(width_), svg_num(height_));
    if (!label_.empty()) head += fmt::format(" aria-label=\"{}\"", xml_escape(label_));
    head += ">\n";
    head += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n",
                        svg_num(width_), svg_num(height_));
    return head + body_ + "</svg>\n";
}

}  // namespace diffract::report
