// Layouts, scales, ticks and axes of the plotting toolkit.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "diffract/report/plot.hpp"

namespace diffract::report {
namespace {

constexpr const char* kAxisColour = "#444444";
constexpr const char* kGridColour = "#e6e6e6";

// The drawn domain of an axis: padded numeric range, positive log range, or category slots.
std::pair<double, double> domain_of(const Axis& a) {
    if (!a.categories.empty()) return {-0.5, static_cast<double>(a.categories.size()) - 0.5};
    Range r = a.range;
    if (a.log) {
        if (r.empty() || r.hi <= 0) return {1, 10};
        const double lo = std::log10(std::max(r.lo, r.hi * 1e-12));
        const double hi = std::log10(r.hi);
        const double pad = std::max((hi - lo) * 0.04, 0.05);
        return {std::pow(10.0, lo - pad), std::pow(10.0, hi + pad)};
    }
    if (a.include_zero) r.add(0.0);
    if (r.empty()) return {0, 1};
    if (r.hi - r.lo < 1e-12 * std::max(1.0, std::abs(r.hi))) {
        const double d = std::max(std::abs(r.hi) * 0.1, 0.5);
        return {r.lo - d, r.hi + d};
    }
    const double pad = (r.hi - r.lo) * 0.04;
    return {r.lo - pad, r.hi + pad};
}

// Category labels too long for their slot are drawn rotated (and the axis label moved down).
bool rotated_categories(const Axis& a, double width) {
    if (a.categories.empty()) return false;
    std::size_t longest = 0;
    for (const auto& c : a.categories) longest = std::max(longest, c.size());
    return static_cast<double>(longest) * 6.2 > width / static_cast<double>(a.categories.size());
}

std::string short_label(const std::string& s, std::size_t max_len) {
    return s.size() <= max_len ? s : s.substr(0, max_len - 1) + "…";
}

}  // namespace

void Range::add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
}

void Range::add(const std::vector<double>& vs) {
    for (double v : vs) add(v);
}

double Scale::operator()(double v) const {
    double a = d0, b = d1;
    if (log) {
        a = std::log10(d0);
        b = std::log10(d1);
        v = v > 0 ? std::log10(v) : a;
    }
    return b == a ? (r0 + r1) / 2 : r0 + (v - a) / (b - a) * (r1 - r0);
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    std::vector<double> ticks;
    if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
    const double raw = (hi - lo) / std::max(target, 1);
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (raw <= m * mag) {
            step = m * mag;
            break;
        }
    for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
        ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
    std::vector<double> ticks;
    if (!(lo > 0) || !(hi > lo)) return ticks;
    const int a = static_cast<int>(std::ceil(std::log10(lo) - 1e-9));
    const int b = static_cast<int>(std::floor(std::log10(hi) + 1e-9));
    const int stride = std::max(1, (b - a + 1) / 6);
    for (int e = a; e <= b; e += stride) ticks.push_back(std::pow(10.0, e));
    return ticks;
}

std::string tick_label(double v, double step) {
    const double a = std::abs(v);
    if (a != 0 && (a >= 1e5 || a < 1e-3)) return fmt::format("{:.0e}", v);
    const int decimals = step >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
    return fmt::format("{:.{}f}", v, decimals);
}

double Layout::width() const { return cols * (panel_w + margin_left + margin_right) + legend_w; }
double Layout::height() const { return rows * (panel_h + margin_top + margin_bottom); }

Frame Layout::frame(int i) const {
    const int c = i % cols, r = i / cols;
    return {c * (panel_w + margin_left + margin_right) + margin_left,
            r * (panel_h + margin_top + margin_bottom) + margin_top, panel_w, panel_h};
}

Layout grid_layout(int n_panels, int max_cols, double panel_w, double panel_h, double legend_w) {
    Layout l;
    l.cols = std::clamp(n_panels, 1, std::max(max_cols, 1));
    l.rows = std::max(1, (n_panels + l.cols - 1) / l.cols);
    l.panel_w = panel_w;
    l.panel_h = panel_h;
    l.legend_w = legend_w;
    return l;
}

Panel draw_axes(Svg& svg, const Frame& f, const std::string& title, const Axis& x, const Axis& y) {
    Panel p;
    p.frame = f;
    const auto [x0, x1] = domain_of(x);
    const auto [y0, y1] = domain_of(y);
    p.sx = {x0, x1, f.x, f.x + f.w, x.log && x.categories.empty()};
    p.sy = {y0, y1, f.y + f.h, f.y, y.log && y.categories.empty()};
    svg.rect(f.x, f.y, f.w, f.h, "#fbfbfb", "", {{"stroke", "#cccccc"}, {"class", "plot-area"}});

    // y ticks and horizontal grid lines
    if (!y.categories.empty()) {
        for (std::size_t i = 0; i < y.categories.size(); ++i) {
            const double py = p.sy(static_cast<double>(i));
            svg.text(f.x - 6, py + 4, short_label(y.categories[i], 12), 10, "end");
        }
    } else {
        const auto ticks = y.log ? log_ticks(y0, y1) : nice_ticks(y0, y1);
        const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : y1 - y0;
        for (double t : ticks) {
            const double py = p.sy(t);
            svg.line(f.x, py, f.x + f.w, py, kGridColour);
            svg.line(f.x - 4, py, f.x, py, kAxisColour);
            svg.text(f.x - 6, py + 3.5, y.log ? fmt::format("{:g}", t) : tick_label(t, step), 10, "end");
        }
    }
    // x ticks and vertical grid lines
    if (!x.categories.empty()) {
        const bool rotate = rotated_categories(x, f.w);
        for (std::size_t i = 0; i < x.categories.size(); ++i) {
            const double px = p.sx(static_cast<double>(i));
            svg.line(px, f.y + f.h, px, f.y + f.h + 4, kAxisColour);
            if (rotate)
                svg.text(px + 3, f.y + f.h + 14, short_label(x.categories[i], 14), 10, "end", -30);
            else
                svg.text(px, f.y + f.h + 15, x.categories[i], 10, "middle");
        }
    } else {
        const auto ticks =
            x.log ? log_ticks(x0, x1) : nice_ticks(x0, x1, std::max(3, static_cast<int>(f.w / 60)));
        const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : x1 - x0;
        for (double t : ticks) {
            const double px = p.sx(t);
            svg.line(px, f.y, px, f.y + f.h, kGridColour);
            svg.line(px, f.y + f.h, px, f.y + f.h + 4, kAxisColour);
            svg.text(px, f.y + f.h + 15, x.log ? fmt::format("{:g}", t) : tick_label(t, step), 10, "middle");
        }
    }
    svg.line(f.x, f.y + f.h, f.x + f.w, f.y + f.h, kAxisColour);
    svg.line(f.x, f.y, f.x, f.y + f.h, kAxisColour);
    svg.text(f.x + f.w / 2, f.y + f.h + (rotated_categories(x, f.w) ? 46 : 34), x.label, 11, "middle");
    svg.text(f.x - 46, f.y + f.h / 2, y.label, 11, "middle", -90);
    svg.text(f.x + f.w / 2, f.y - 9, title, 12, "middle", 0, "bold");
    return p;
}

void draw_empty_note(Svg& svg, const Frame& f, const std::string& title, const std::string& note) {
    svg.rect(f.x, f.y, f.w, f.h, "#fbfbfb", "", {{"stroke", "#cccccc"}});
    svg.text(f.x + f.w / 2, f.y + f.h / 2, note, 11, "middle");
    svg.text(f.x + f.w / 2, f.y - 9, title, 12, "middle", 0, "bold");
}

}  // namespace diffract::report
