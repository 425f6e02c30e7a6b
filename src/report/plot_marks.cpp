// The marks of the plotting toolkit: lines, bands, points, boxes, heatmaps, histograms, legends.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "diffract/core/random.hpp"
#include "diffract/report/plot.hpp"
#include "diffract/report/stats.hpp"

namespace diffract::report {
namespace {

// A deterministic jitter in [-1, 1] for the i-th point (splitmix64), so reports are reproducible.
double jitter(std::uint64_t i) {
    std::uint64_t state = i;
    return unit_interval(splitmix64(state)) * 2.0 - 1.0;
}

bool finite(Point pt) { return std::isfinite(pt.x) && std::isfinite(pt.y); }

}  // namespace

void draw_line(Svg& svg, const Panel& p, const std::vector<Point>& pts, const std::string& colour,
               double width, const std::string& dash, const std::string& tooltip) {
    std::vector<std::pair<double, double>> run;
    const auto flush = [&] {
        if (run.size() == 1) svg.circle(run[0].first, run[0].second, width * 1.2, colour, tooltip);
        if (run.size() > 1) svg.polyline(run, colour, width, dash, tooltip);
        run.clear();
    };
    for (const auto& pt : pts) {
        if (finite(pt))
            run.emplace_back(p.px(pt.x), p.py(pt.y));
        else
            flush();
    }
    flush();
}

void draw_band(Svg& svg, const Panel& p, const std::vector<double>& xs, const std::vector<double>& lo,
               const std::vector<double>& hi, const std::string& colour, double opacity) {
    std::vector<std::pair<double, double>> upper, lower;
    for (std::size_t i = 0; i < xs.size() && i < lo.size() && i < hi.size(); ++i) {
        if (!std::isfinite(xs[i]) || !std::isfinite(lo[i]) || !std::isfinite(hi[i])) continue;
        upper.emplace_back(p.px(xs[i]), p.py(hi[i]));
        lower.emplace_back(p.px(xs[i]), p.py(lo[i]));
    }
    if (upper.size() < 2) return;
    upper.insert(upper.end(), lower.rbegin(), lower.rend());
    svg.polygon(upper, colour, opacity);
}

void draw_point(Svg& svg, const Panel& p, Point pt, const std::string& colour, double r,
                const std::string& tooltip, double opacity) {
    if (finite(pt)) svg.circle(p.px(pt.x), p.py(pt.y), r, colour, tooltip, opacity);
}

void draw_ring(Svg& svg, const Panel& p, Point pt, const std::string& colour, double r,
               const std::string& tooltip) {
    if (finite(pt)) svg.ring(p.px(pt.x), p.py(pt.y), r, colour, tooltip);
}

void draw_box(Svg& svg, const Panel& p, double x, const std::vector<double>& values,
              const std::string& colour, const std::vector<std::string>& tooltips, double half_width) {
    const auto f = finite_values(values);
    if (f.empty()) return;
    const double q1 = quantile_of(f, 0.25), q2 = quantile_of(f, 0.5), q3 = quantile_of(f, 0.75);
    const double iqr = q3 - q1;
    double wlo = q2, whi = q2;
    for (double v : f) {
        if (v >= q1 - 1.5 * iqr) wlo = std::min(wlo, v);
        if (v <= q3 + 1.5 * iqr) whi = std::max(whi, v);
    }
    const double half = std::abs(p.px(x + half_width) - p.px(x));
    const double cx = p.px(x);
    svg.line(cx, p.py(wlo), cx, p.py(q1), colour, 1.2);
    svg.line(cx, p.py(q3), cx, p.py(whi), colour, 1.2);
    svg.line(cx - half / 2, p.py(wlo), cx + half / 2, p.py(wlo), colour, 1.2);
    svg.line(cx - half / 2, p.py(whi), cx + half / 2, p.py(whi), colour, 1.2);
    svg.rect(cx - half, p.py(q3), 2 * half, p.py(q1) - p.py(q3), colour,
             fmt::format("n={}  median {:.4g}  IQR [{:.4g}, {:.4g}]", f.size(), q2, q1, q3),
             {{"fill-opacity", "0.18"}, {"stroke", colour}, {"stroke-width", "1.2"}});
    svg.line(cx - half, p.py(q2), cx + half, p.py(q2), colour, 2.2);
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (!std::isfinite(values[i])) continue;
        const double jx = cx + jitter(i) * half * 0.8;
        svg.circle(jx, p.py(values[i]), 2.2, colour, i < tooltips.size() ? tooltips[i] : "", 0.6);
    }
}

void draw_heatmap(Svg& svg, const Panel& p, const std::vector<std::vector<double>>& cells,
                  const ColourMap& map, const std::function<std::string(int, int)>& tooltip) {
    svg.begin_group({{"class", "heatmap"}});
    for (std::size_t r = 0; r < cells.size(); ++r) {
        for (std::size_t c = 0; c < cells[r].size(); ++c) {
            const double x0 = p.px(static_cast<double>(c) - 0.5), x1 = p.px(static_cast<double>(c) + 0.5);
            const double y0 = p.py(static_cast<double>(r) + 0.5), y1 = p.py(static_cast<double>(r) - 0.5);
            svg.rect(x0, y0, x1 - x0, y1 - y0, map.at(cells[r][c]),
                     tooltip(static_cast<int>(r), static_cast<int>(c)), {{"class", "cell"}});
        }
    }
    svg.end_group();
}

void draw_colour_bar(Svg& svg, double x, double y, double h, const ColourMap& map, const std::string& label) {
    constexpr int kSteps = 48;
    constexpr double kWidth = 12;
    for (int i = 0; i < kSteps; ++i) {
        const double t = (i + 0.5) / kSteps;
        svg.rect(x, y + h - (i + 1) * h / kSteps, kWidth, h / kSteps + 0.5,
                 map.at(map.lo + t * (map.hi - map.lo)));
    }
    svg.rect(x, y, kWidth, h, "none", "", {{"stroke", "#888888"}});
    const auto ticks = nice_ticks(map.lo, map.hi, 5);
    const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : map.hi - map.lo;
    for (double t : ticks) {
        const double py = y + h - (t - map.lo) / (map.hi - map.lo) * h;
        svg.line(x + kWidth, py, x + kWidth + 3, py, "#444444");
        svg.text(x + kWidth + 5, py + 3.5, tick_label(t, step), 10);
    }
    svg.text(x, y - 7, label, 10, "start", 0, "bold");
}

void draw_histogram(Svg& svg, const Panel& p, const std::vector<double>& edges,
                    const std::vector<double>& heights, const std::string& colour) {
    const double base = p.frame.y + p.frame.h;
    for (std::size_t i = 0; i + 1 < edges.size() && i < heights.size(); ++i) {
        if (!(heights[i] > 0)) continue;
        const double x0 = p.px(edges[i]), x1 = p.px(edges[i + 1]);
        const double top = std::clamp(p.py(heights[i]), p.frame.y, base);
        svg.rect(x0, top, x1 - x0, base - top, colour,
                 fmt::format("[{:.4g}, {:.4g}): {:.4g}", edges[i], edges[i + 1], heights[i]),
                 {{"fill-opacity", "0.45"}, {"stroke", "white"}, {"stroke-width", "0.5"}});
    }
}

double draw_legend(Svg& svg, double x, double y, const std::vector<LegendEntry>& entries,
                   const std::string& title) {
    svg.begin_group({{"class", "legend"}});
    if (!title.empty()) {
        svg.text(x, y, fit_text(title, svg.width() - x - 4, 11), 11, "start", 0, "bold");
        y += 16;
    }
    for (const auto& e : entries) {
        switch (e.mark) {
            case LegendMark::line:
                svg.line(x, y - 4, x + 22, y - 4, e.colour, 2.2);
                break;
            case LegendMark::dashed:
                svg.line(x, y - 4, x + 22, y - 4, e.colour, 2.2, "5 3");
                break;
            case LegendMark::dotted:
                svg.line(x, y - 4, x + 22, y - 4, e.colour, 1.2, "2 3");
                break;
            case LegendMark::thin:
                svg.line(x, y - 4, x + 22, y - 4, e.colour, 0.8);
                break;
            case LegendMark::point:
                svg.circle(x + 11, y - 4, 4, e.colour);
                break;
            case LegendMark::ring:
                svg.ring(x + 11, y - 4, 4, e.colour);
                break;
            case LegendMark::band:
                svg.rect(x, y - 9, 22, 10, e.colour, "", {{"fill-opacity", "0.25"}});
                break;
            case LegendMark::box:
                svg.rect(x + 4, y - 10, 14, 12, e.colour, "",
                         {{"fill-opacity", "0.2"}, {"stroke", e.colour}});
                break;
        }
        svg.text(x + 28, y, fit_text(e.label, svg.width() - x - 32, 11), 11);
        y += 16;
    }
    svg.end_group();
    return y;
}

}  // namespace diffract::report
