// Sweep figures from curve.csv: rewind curves (score against the fraction of heads rewound, one line
// per ordering, mean ± 1 std over seeds as a band), the interpolation trade-off (score on one
// evaluation against the other along ω, or score against ω), and SVD-truncation curves (score
// relative to the untruncated delta against the fraction of singular values kept).
#include <map>

#include <fmt/format.h>

#include "diffract/report/stats.hpp"
#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

// Per ordering, per x: the scores of column `col` over seeds.
using Curves = std::map<std::string, std::map<double, std::vector<double>>>;

Curves curves_of(const Sweep& s, std::size_t col) {
    Curves c;
    for (const auto& p : s.points) c[p.order][p.x].push_back(p.scores[col]);
    return c;
}

void draw_curves(Svg& svg, const Panel& p, const Curves& curves, ColourAssigner& colours, double scale,
                 std::vector<LegendEntry>& legend, const std::string& prefix) {
    for (const auto& [order, by_x] : curves) {
        const std::string name = prefix + (order.empty() ? "score" : order);
        const auto& colour = colours(name);
        std::vector<double> xs, lo, hi;
        std::vector<Point> pts;
        for (const auto& [x, vs] : by_x) {
            const double mu = mean_of(vs) / scale, sd = stddev_of(vs) / scale;
            xs.push_back(x);
            lo.push_back(mu - sd);
            hi.push_back(mu + sd);
            pts.push_back({x, mu});
        }
        draw_band(svg, p, xs, lo, hi, colour);
        const bool random = order.find("random") != std::string::npos;
        draw_line(svg, p, pts, colour, 2, random ? "5 3" : "", name);
        for (std::size_t i = 0; i < pts.size(); ++i)
            draw_point(svg, p, pts[i], colour, 2.5,
                       fmt::format("{} · x = {:.4g}: {:.4g} ± {:.2g} (n = {})", name, pts[i].x, pts[i].y,
                                   hi[i] - pts[i].y, by_x.at(xs[i]).size()));
        if (std::none_of(legend.begin(), legend.end(), [&](const auto& e) { return e.label == name; }))
            legend.push_back({name, colour, random ? LegendMark::dashed : LegendMark::line});
    }
}

Range curve_range(const Curves& curves, double scale) {
    Range r;
    for (const auto& [order, by_x] : curves)
        for (const auto& [x, vs] : by_x) {
            r.add((mean_of(vs) - stddev_of(vs)) / scale);
            r.add((mean_of(vs) + stddev_of(vs)) / scale);
        }
    return r;
}

Range x_range(const Curves& curves) {
    Range r;
    for (const auto& [order, by_x] : curves)
        for (const auto& [x, vs] : by_x) r.add(x);
    return r;
}

// The score of the whole delta: summary.json's baseline, else the mean score at the largest x.
double truncation_reference(const Sweep& s) {
    if (s.baseline && *s.baseline != 0) return *s.baseline;
    double best_x = -INFINITY;
    std::vector<double> at;
    for (const auto& p : s.points) {
        if (p.x > best_x) {
            best_x = p.x;
            at.clear();
        }
        if (p.x == best_x) at.push_back(p.scores[0]);
    }
    const double m = mean_of(at);
    return std::isfinite(m) && m != 0 ? m : 1.0;
}

Figure panels_figure(FigureContext& ctx, const std::vector<const Sweep*>& sweeps, const std::string& kind) {
    const auto layout = grid_layout(static_cast<int>(sweeps.size()), 3, 320, 230, 170);
    Svg svg(layout.width(), layout.height(), "figure", kind + " sweeps");
    ColourAssigner colours(ctx.config.colours);
    std::vector<LegendEntry> legend;
    for (std::size_t i = 0; i < sweeps.size(); ++i) {
        const auto& s = *sweeps[i];
        const auto frame = layout.frame(static_cast<int>(i));
        if (kind == "interpolate" && s.score_columns.size() >= 2) {
            Axis x{s.score_columns[0], {}, false, {}, false}, y{s.score_columns[1], {}, false, {}, false};
            for (const auto& pt : s.points) {
                x.range.add(pt.scores[0]);
                y.range.add(pt.scores[1]);
            }
            const auto p = draw_axes(svg, frame, s.name, x, y);
            std::map<double, std::pair<std::vector<double>, std::vector<double>>> by_w;
            for (const auto& pt : s.points) {
                by_w[pt.x].first.push_back(pt.scores[0]);
                by_w[pt.x].second.push_back(pt.scores[1]);
            }
            std::vector<Point> path;
            for (const auto& [w, sc] : by_w) path.push_back({mean_of(sc.first), mean_of(sc.second)});
            const auto& colour = colours(s.name);
            draw_line(svg, p, path, colour, 1.6);
            std::size_t k = 0;
            for (const auto& [w, sc] : by_w)
                draw_point(svg, p, path[k++], colour, 3.5,
                           fmt::format("ω = {:.3g}: {} {:.4g}, {} {:.4g}", w, s.score_columns[0],
                                       mean_of(sc.first), s.score_columns[1], mean_of(sc.second)));
            if (!path.empty()) {
                svg.text(p.px(path.front().x) + 5, p.py(path.front().y) - 5,
                         "ω=" + tick_label(by_w.begin()->first, 0.1), 10);
                svg.text(p.px(path.back().x) + 5, p.py(path.back().y) - 5,
                         "ω=" + tick_label(by_w.rbegin()->first, 0.1), 10);
            }
            continue;
        }
        const auto curves = curves_of(s, 0);
        const double scale = kind == "truncate" ? truncation_reference(s) : 1.0;
        const std::string x_label = kind == "rewind"        ? "fraction of heads rewound"
                                    : kind == "truncate"    ? "fraction of singular values kept"
                                    : kind == "interpolate" ? "interpolation weight ω"
                                                            : "x";
        Axis x{x_label, x_range(curves), false, {}, false};
        Axis y{kind == "truncate" ? "relative score (÷ full delta)" : s.score_columns[0],
               curve_range(curves, scale),
               false,
               {},
               false};
        if (s.baseline && kind != "truncate") y.range.add(*s.baseline);
        const auto p = draw_axes(svg, frame, s.name, x, y);
        if (s.baseline && kind != "truncate") {
            svg.line(frame.x, p.py(*s.baseline), frame.x + frame.w, p.py(*s.baseline), "#777777", 1, "2 3");
            svg.text(frame.x + frame.w - 4, p.py(*s.baseline) - 4, "unedited", 10, "end");
        }
        if (kind == "truncate")
            svg.line(frame.x, p.py(1.0), frame.x + frame.w, p.py(1.0), "#777777", 1, "2 3");
        draw_curves(svg, p, curves, colours, scale, legend, "");
    }
    if (!legend.empty()) draw_legend(svg, layout.legend_x(), layout.margin_top + 4, legend, "ordering");
    static const std::map<std::string, std::pair<std::string, std::string>> kText{
        {"rewind",
         {"Head rewind",
          "Score against the fraction of attention heads rewound to the base, one line per head "
          "ordering: the mean over seeds, its ±1 std band (random orderings dashed); the dotted line "
          "is the unedited model when summary.json gives it."}},
        {"truncate",
         {"SVD truncation of the update",
          "Score relative to the untruncated update against the fraction of the "
          "update's singular values kept (largest first); mean ± 1 std over seeds."}},
        {"interpolate",
         {"Interpolation trade-off",
          "Score on one evaluation against the other along the interpolation "
          "(1 − ω)·W₁ + ω·W₂ (hover a point for ω), or the score against ω when the sweep "
          "has one evaluation."}},
        {"sweep", {"Sweep", "Score against the swept parameter x, mean ± 1 std over seeds."}}};
    const auto& [title, caption] = kText.at(kind);
    return {figure_id("sweep", kind), title, caption, svg.str()};
}

}  // namespace

void add_sweeps(FigureContext& ctx, std::vector<Figure>& out) {
    for (const char* kind : {"rewind", "interpolate", "truncate", "sweep"}) {
        std::vector<const Sweep*> sweeps;
        for (const auto& s : ctx.data.sweeps)
            if (s.kind == kind && !s.points.empty()) sweeps.push_back(&s);
        if (!sweeps.empty()) out.push_back(panels_figure(ctx, sweeps, kind));
    }
    for (const auto& s : ctx.data.sweeps)
        if (s.kind == "rewind-each")
            ctx.notes.push_back(fmt::format("{}: rewind-each sweeps are not drawn yet", s.source));
    if (ctx.data.sweeps.empty())
        ctx.notes.push_back(
            "sweep figures (rewind, interpolation, truncation): no curve.csv among the inputs");
}

}  // namespace diffract::report
