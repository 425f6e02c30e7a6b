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

}  // namespace

bool rotated_categories(const Axis& a, double width) {
    if (a.categories.empty()) return false;
    std::size_t longest = 0;
    for (const auto& c : a.categories) longest = std::max(longest, c.size());
    return static_cast<double>(longest) * 6.2 > width / static_cast<double>(a.categories.size());
}

namespace {

constexpr double kTickFont = 10;
constexpr double kPi = 3.14159265358979323846;
constexpr double kTickGap = 4;  // the least room between neighbouring tick labels

// A tick of a numeric axis: its value and its label.
struct Tick {
    double value;
    std::string label;
};

// Whether labels at these positions (pixels along the axis) keep kTickGap apart: along x each takes
// its estimated width, along y one line of text.
bool labels_fit(const std::vector<Tick>& ticks, const Scale& scale, bool along_x) {
    for (std::size_t i = 1; i < ticks.size(); ++i) {
        const double room = std::abs(scale(ticks[i].value) - scale(ticks[i - 1].value));
        const double need =
            along_x ? (text_width(ticks[i].label, kTickFont) + text_width(ticks[i - 1].label, kTickFont)) / 2
                    : kTickFont;
        if (room < need + kTickGap) return false;
    }
    return true;
}

// The ticks of a numeric axis: nice linear steps, fewer until the labels fit; on a log axis powers
// of ten, every k-th one until they fit.
std::vector<Tick> axis_ticks(const Axis& a, const Scale& scale, double length, bool along_x) {
    std::vector<Tick> ticks;
    if (a.log) {
        for (int stride = 1; stride <= 64; ++stride) {
            ticks.clear();
            for (double t : log_ticks(scale.d0, scale.d1, stride)) ticks.push_back({t, log_tick_label(t)});
            if (labels_fit(ticks, scale, along_x)) break;
        }
        if (ticks.size() >= 2) return ticks;
        // Less than a decade or two: 1, 2 and 5 times the powers of ten.
        std::vector<Tick> fine;
        for (int e = static_cast<int>(std::floor(std::log10(scale.d0))); e <= std::ceil(std::log10(scale.d1));
             ++e)
            for (double m : {1.0, 2.0, 5.0}) {
                const double t = m * std::pow(10.0, e);
                if (t >= scale.d0 && t <= scale.d1) fine.push_back({t, fmt::format("{:g}", t)});
            }
        return fine.size() >= 2 && labels_fit(fine, scale, along_x) ? fine : ticks;
    }
    for (int target = along_x ? std::max(3, static_cast<int>(length / 60)) : 5; target >= 1; --target) {
        auto values = nice_ticks(scale.d0, scale.d1, target);
        if (a.integer) {
            // Steps below one become one; positions between whole numbers are dropped.
            if (values.size() > 1 && values[1] - values[0] < 1) {
                values.clear();
                for (double t = std::ceil(scale.d0); t <= scale.d1; t += 1) values.push_back(t);
            }
            std::erase_if(values, [](double t) { return t != std::round(t); });
        }
        const double step = values.size() > 1 ? values[1] - values[0] : scale.d1 - scale.d0;
        ticks.clear();
        for (double t : values) ticks.push_back({t, tick_label(t, step)});
        if (labels_fit(ticks, scale, along_x)) break;
    }
    return ticks;
}

// Every k-th category keeps a label when all of them would not fit along the axis.
std::size_t category_stride(const Axis& a, double length, bool along_x) {
    if (a.categories.empty()) return 1;
    double need = kTickFont;
    if (along_x)
        for (const auto& c : a.categories) need = std::max(need, text_width(c, kTickFont));
    const double slot = length / static_cast<double>(a.categories.size());
    return static_cast<std::size_t>(std::max(1.0, std::ceil((need + kTickGap) / slot)));
}

}  // namespace

double text_width(std::string_view s, double size) {
    std::size_t chars = 0;
    for (unsigned char c : s) chars += (c & 0xC0) != 0x80;  // UTF-8 code points
    return static_cast<double>(chars) * size * 0.6;
}

std::string fit_text(const std::string& s, double width, double size) {
    if (text_width(s, size) <= width) return s;
    if (const auto paren = s.find(" ("); paren != std::string::npos)
        if (text_width(s.substr(0, paren), size) <= width) return s.substr(0, paren);
    // Elide the middle: names differ at their start ("math-…") as often as at their end ("…-20B").
    std::vector<std::string> cps;  // code points
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80 || cps.empty())
            cps.emplace_back(1, static_cast<char>(c));
        else
            cps.back() += static_cast<char>(c);
    const auto keep = static_cast<std::size_t>(std::max(0.0, std::floor(width / (size * 0.6)) - 1));
    std::string out;
    for (std::size_t i = 0; i < (keep + 1) / 2; ++i) out += cps[i];
    out += "…";
    for (std::size_t i = cps.size() - keep / 2; i < cps.size(); ++i) out += cps[i];
    return out;
}

std::string log_tick_label(double v) {
    const int e = static_cast<int>(std::lround(std::log10(v)));
    if (e >= -2 && e <= 3) return fmt::format("{:g}", std::pow(10.0, e));
    static const char* kSuperscript[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
    std::string s = e < 0 ? "10⁻" : "10";
    for (char d : std::to_string(std::abs(e))) s += kSuperscript[d - '0'];
    return s;
}

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

std::vector<double> log_ticks(double lo, double hi, int stride) {
    std::vector<double> ticks;
    if (!(lo > 0) || !(hi > lo)) return ticks;
    const int a = static_cast<int>(std::ceil(std::log10(lo) - 1e-9));
    const int b = static_cast<int>(std::floor(std::log10(hi) + 1e-9));
    if (stride <= 0) stride = std::max(1, (b - a + 1) / 6);
    // Multiples of the stride (…, 1e-6, 1e-3, 1) rather than offsets from the lowest power.
    for (int e = a; e <= b; ++e)
        if (e % stride == 0) ticks.push_back(std::pow(10.0, e));
    if (ticks.empty()) ticks.push_back(std::pow(10.0, a));
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

    // y ticks and horizontal grid lines; the axis title clears the widest tick label.
    double widest = 0;
    if (!y.categories.empty()) {
        const auto stride = category_stride(y, f.h, false);
        for (std::size_t i = 0; i < y.categories.size(); i += stride) {
            const double py = p.sy(static_cast<double>(i));
            const auto label = fit_text(y.categories[i], 40, kTickFont);
            widest = std::max(widest, text_width(label, kTickFont));
            svg.text(f.x - 6, py + 4, label, kTickFont, "end");
        }
    } else {
        for (const auto& t : axis_ticks(y, p.sy, f.h, false)) {
            const double py = p.sy(t.value);
            svg.line(f.x, py, f.x + f.w, py, kGridColour);
            svg.line(f.x - 4, py, f.x, py, kAxisColour);
            widest = std::max(widest, text_width(t.label, kTickFont));
            svg.text(f.x - 6, py + 3.5, t.label, kTickFont, "end");
        }
    }
    // x ticks and vertical grid lines
    const bool rotate = rotated_categories(x, f.w);
    if (!x.categories.empty()) {
        const auto stride = category_stride(x, f.w, !rotate);
        for (std::size_t i = 0; i < x.categories.size(); ++i) {
            const double px = p.sx(static_cast<double>(i));
            svg.line(px, f.y + f.h, px, f.y + f.h + 4, kAxisColour);
            if (i % stride != 0) continue;
            // Rotated labels stay above the axis title (72 px: 12 characters; kRotatedMargin) and right of
            // the figure's edge.
            if (rotate)
                svg.text(
                    px + 3, f.y + f.h + 14,
                    fit_text(x.categories[i], std::min(72.0, (px + 3) / std::cos(kPi / 6) - 4), kTickFont),
                    kTickFont, "end", -30);
            else
                svg.text(px, f.y + f.h + 15, x.categories[i], kTickFont, "middle");
        }
    } else {
        for (const auto& t : axis_ticks(x, p.sx, f.w, true)) {
            const double px = p.sx(t.value);
            svg.line(px, f.y, px, f.y + f.h, kGridColour);
            svg.line(px, f.y + f.h, px, f.y + f.h + 4, kAxisColour);
            svg.text(px, f.y + f.h + 15, t.label, kTickFont, "middle");
        }
    }
    svg.line(f.x, f.y + f.h, f.x + f.w, f.y + f.h, kAxisColour);
    svg.line(f.x, f.y, f.x, f.y + f.h, kAxisColour);
    svg.text(f.x + f.w / 2, f.y + f.h + (rotate ? kRotatedMargin - 8 : 34), fit_text(x.label, f.w + 40, 11),
             11, "middle");
    // A rotated title's glyphs reach about 0.75 of its size left of its baseline and 0.25 right.
    svg.text(std::min(f.x - 46, f.x - 6 - widest - kTickGap - 11 * 0.25), f.y + f.h / 2,
             fit_text(y.label, f.h + 20, 11), 11, "middle", -90);
    svg.text(f.x + f.w / 2, f.y - 9, fit_text(title, f.w + 40, 12), 12, "middle", 0, "bold");
    return p;
}

void draw_empty_note(Svg& svg, const Frame& f, const std::string& title, const std::string& note) {
    svg.rect(f.x, f.y, f.w, f.h, "#fbfbfb", "", {{"stroke", "#cccccc"}});
    svg.text(f.x + f.w / 2, f.y + f.h / 2, note, 11, "middle");
    svg.text(f.x + f.w / 2, f.y - 9, title, 12, "middle", 0, "bold");
}

}  // namespace diffract::report
