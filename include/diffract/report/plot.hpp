// A small plotting toolkit over Svg: figure layouts (a grid of panels and a legend column), axes with
// ticks, grid lines and labels (linear, log10 or categorical), and the marks the report draws: lines,
// bands, points, box plots with jittered points, heatmaps with a colour bar, histograms, legends.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/report/palette.hpp"
#include "diffract/report/svg.hpp"

namespace diffract::report {

// A data interval grown value by value (non-finite values are ignored).
struct Range {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -std::numeric_limits<double>::infinity();
    void add(double v);
    void add(const std::vector<double>& vs);
    bool empty() const { return !(lo <= hi); }
};

// Linear or log10 map of [d0, d1] onto [r0, r1].
struct Scale {
    double d0 = 0, d1 = 1, r0 = 0, r1 = 1;
    bool log = false;
    double operator()(double v) const;
};

// "Nice" tick positions (1, 2, 5 × 10^k steps) covering [lo, hi]; powers of ten on a log axis.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// Powers of ten in [lo, hi] whose exponent is a multiple of `stride` (≤ 0: about six ticks).
std::vector<double> log_ticks(double lo, double hi, int stride = 0);
// A tick label: as few digits as the step needs; 1e-3 style for very small or large values.
std::string tick_label(double v, double step);
// A log axis' tick label: 0.01 … 1000 plainly, else 10⁻⁵, 10⁶.
std::string log_tick_label(double v);
// The estimated width of a text in pixels: code points × size × 0.6 (the report's layout rule; the
// tests measure labels the same way).
double text_width(std::string_view s, double size);
// `s` if it fits in `width` pixels, else without its parenthesised gloss ("pl_alpha (power-law
// exponent α)" → "pl_alpha"), else cut with an ellipsis.
std::string fit_text(const std::string& s, double width, double size);

struct Axis {
    std::string label;                    // with units where there are any
    Range range;                          // data range (padded when drawn, unless categorical)
    bool log = false;                     // log10 (values ≤ 0 dropped from the range)
    std::vector<std::string> categories;  // categorical: ticks at 0..n-1
    bool include_zero = false;
    bool integer = false;  // whole-number positions only (layers, heads): no tick at 1.5
};

struct Frame {
    double x = 0, y = 0, w = 0, h = 0;  // plot area, figure coordinates
};

struct Panel {
    Frame frame;
    Scale sx, sy;
    double px(double v) const { return sx(v); }
    double py(double v) const { return sy(v); }
};

// Panels on a grid, room for axis labels around each, a title strip, and a legend column on the right.
struct Layout {
    int cols = 1, rows = 1;
    double panel_w = 300, panel_h = 220, legend_w = 0;
    double margin_left = 62, margin_right = 18, margin_top = 34, margin_bottom = 52;
    double width() const;
    double height() const;
    Frame frame(int i) const;
    double legend_x() const { return width() - legend_w + 6; }
};
Layout grid_layout(int n_panels, int max_cols, double panel_w, double panel_h, double legend_w = 0);

// Whether a categorical x axis this wide draws its labels rotated (too long for their slots); its
// panels then need kRotatedMargin below them (the labels and the axis title under them).
bool rotated_categories(const Axis& a, double width);
constexpr double kRotatedMargin = 72;

// Background, grid, ticks, tick labels, axis labels and a panel title; returns the scales.
Panel draw_axes(Svg& svg, const Frame& frame, const std::string& title, const Axis& x, const Axis& y);
// A note centred in an empty panel ("no data for attn_q").
void draw_empty_note(Svg& svg, const Frame& frame, const std::string& title, const std::string& note);

struct Point {
    double x, y;
};

// A polyline broken at non-finite points.
void draw_line(Svg& svg, const Panel& p, const std::vector<Point>& pts, const std::string& colour,
               double width = 1.8, const std::string& dash = "", const std::string& tooltip = "");
// The area between lo and hi along xs (non-finite points skipped).
void draw_band(Svg& svg, const Panel& p, const std::vector<double>& xs, const std::vector<double>& lo,
               const std::vector<double>& hi, const std::string& colour, double opacity = 0.18);
void draw_point(Svg& svg, const Panel& p, Point pt, const std::string& colour, double r = 3,
                const std::string& tooltip = "", double opacity = 0.85);
// A hollow point: a value drawn but flagged (a fit whose status is not ok).
void draw_ring(Svg& svg, const Panel& p, Point pt, const std::string& colour, double r = 3.5,
               const std::string& tooltip = "");

// Box (quartiles), whiskers (1.5 IQR), median line, and the values as jittered points at
// category position `x`. `tooltips[i]` labels values[i].
// `half_width`: the box's half width in category units (0.3 for one box per category; less when
// several boxes share a category).
void draw_box(Svg& svg, const Panel& p, double x, const std::vector<double>& values,
              const std::string& colour, const std::vector<std::string>& tooltips, double half_width = 0.3);

// Cells [row][col] on a rows × cols grid, rows bottom-up (row 0 at the bottom); `tooltip(row, col)`.
void draw_heatmap(Svg& svg, const Panel& p, const std::vector<std::vector<double>>& cells,
                  const ColourMap& map, const std::function<std::string(int, int)>& tooltip);
void draw_colour_bar(Svg& svg, double x, double y, double h, const ColourMap& map, const std::string& label);

// Bars between consecutive edges.
void draw_histogram(Svg& svg, const Panel& p, const std::vector<double>& edges,
                    const std::vector<double>& heights, const std::string& colour);

enum class LegendMark { line, dashed, dotted, thin, point, ring, band, box };
struct LegendEntry {
    std::string label, colour;
    LegendMark mark = LegendMark::line;
};
// Entries stacked from (x, y) in the figure's right-hand column; labels are cut to fit the figure.
// Returns the y below the last one.
double draw_legend(Svg& svg, double x, double y, const std::vector<LegendEntry>& entries,
                   const std::string& title = "");

}  // namespace diffract::report
