// A minimal SVG document builder: elements with attributes, optional <title> tooltips (the browser's
// native hover text), XML escaping. The plotting toolkit (plot.hpp) draws through it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace diffract::report {

// Escapes &, <, >, " and ' for XML text and attribute values.
std::string xml_escape(std::string_view s);

// A number as an SVG coordinate: fixed, at most 2 decimals, no trailing zeros.
std::string svg_num(double v);

using Attrs = std::vector<std::pair<std::string, std::string>>;

class Svg {
public:
    // `css_class` goes on the root element (the report counts `<svg class="figure"`).
    Svg(double width, double height, std::string css_class = "figure", std::string label = "");

    double width() const { return width_; }
    double height() const { return height_; }

    // <name attrs...> with an optional <title> child (tooltip).
    void element(std::string_view name, const Attrs& attrs, std::string_view tooltip = "");
    void rect(double x, double y, double w, double h, std::string_view fill, std::string_view tooltip = "",
              const Attrs& extra = {});
    void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1.0,
              std::string_view dash = "");
    void polyline(const std::vector<std::pair<double, double>>& pts, std::string_view stroke, double width,
                  std::string_view dash = "", std::string_view tooltip = "");
    void polygon(const std::vector<std::pair<double, double>>& pts, std::string_view fill, double opacity);
    void circle(double cx, double cy, double r, std::string_view fill, std::string_view tooltip = "",
                double opacity = 1.0);
    // A hollow circle: white inside, `stroke` outline (a value shown but flagged).
    void ring(double cx, double cy, double r, std::string_view stroke, std::string_view tooltip = "");
    // anchor: start | middle | end; rotate: degrees about (x, y).
    void text(double x, double y, std::string_view s, double size = 11, std::string_view anchor = "start",
              double rotate = 0, std::string_view weight = "normal");

    // Groups: nest elements until the matching end_group().
    void begin_group(const Attrs& attrs);
    void end_group();

    std::string str() const;  // the complete document, without an XML prolog

private:
    double width_, height_;
    std::string class_, label_, body_;
};

}  // namespace diffract::report
