// Sweep figures from curve.csv: rewind curves (score against the fraction of heads rewound, one line
// per ordering), the interpolation trade-off (score on one evaluation against the other along ω, or
// score against ω), and SVD-truncation curves (score relative to the untruncated delta against the
// fraction of singular values kept). Wherever a sweep has several seeds: the mean, its ±1 std band
// and each seed's own thin line; summary.json's references (the base, the unedited model, the
// interpolation's endpoints) as labelled dotted lines.
#include <algorithm>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "diffract/report/stats.hpp"
#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

constexpr const char* kReferenceColour = "#555555";
constexpr double kLabelFont = 10;

// Per ordering, per x: the scores of column `col` over seeds.
using Curves = std::map<std::string, std::map<double, std::vector<double>>>;
// Per (ordering, seed): the points of column `col` in x order.
using SeedLines = std::map<std::pair<std::string, long long>, std::vector<Point>>;

Curves curves_of(const Sweep& s, std::size_t col) {
    Curves c;
    for (const auto& p : s.points) c[p.order][p.x].push_back(p.scores[col]);
    return c;
}

SeedLines seed_lines(const Sweep& s, std::size_t col, double scale) {
    SeedLines lines;
    for (const auto& p : s.points) lines[{p.order, p.seed}].push_back({p.x, p.scores[col] / scale});
    for (auto& [key, pts] : lines)
        std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
    return lines;
}

// Whether some ordering of the sweep was run with more than one seed.
bool has_seeds(const Sweep& s) {
    std::map<std::string, std::vector<long long>> seeds;
    for (const auto& p : s.points) {
        auto& v = seeds[p.order];
        if (std::find(v.begin(), v.end(), p.seed) == v.end()) v.push_back(p.seed);
    }
    return std::any_of(seeds.begin(), seeds.end(), [](const auto& kv) { return kv.second.size() > 1; });
}

// The mean evaluation time of the points at x of one ordering, "" when curve.csv has none.
std::string seconds_note(const Sweep& s, const std::string& order, double x) {
    std::vector<double> t;
    for (const auto& p : s.points)
        if (p.order == order && p.x == x) t.push_back(p.eval_seconds);
    const double m = mean_of(t);
    return std::isfinite(m) ? fmt::format(", evaluated in {:.3g} s", m) : "";
}

void draw_curves(Svg& svg, const Panel& p, const Sweep& s, const Curves& curves, ColourAssigner& colours,
                 double scale, std::vector<LegendEntry>& legend) {
    if (has_seeds(s)) {
        // Each seed's own curve, thin and faint under the mean: the spread as measured, not summarised.
        svg.begin_group({{"class", "seed-lines"}, {"opacity", "0.45"}});
        for (const auto& [key, pts] : seed_lines(s, 0, scale))
            draw_line(svg, p, pts, colours(key.first.empty() ? "score" : key.first), 0.8, "",
                      fmt::format("{} · seed {}", key.first, key.second));
        svg.end_group();
    }
    for (const auto& [order, by_x] : curves) {
        const std::string name = order.empty() ? "score" : order;
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
                       fmt::format("{} · x = {:.4g}: {:.4g} ± {:.2g} (n = {}){}", name, pts[i].x, pts[i].y,
                                   hi[i] - pts[i].y, by_x.at(xs[i]).size(), seconds_note(s, order, xs[i])));
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
            for (double v : vs) r.add(v / scale);  // the seeds' own lines
        }
    return r;
}

Range x_range(const Curves& curves) {
    Range r;
    for (const auto& [order, by_x] : curves)
        for (const auto& [x, vs] : by_x) r.add(x);
    return r;
}

// The references drawn with a sweep: summary.json's "references", else its legacy baseline score
// (the unedited model; for a truncation, the full update).
std::vector<SweepReference> references_of(const Sweep& s) {
    if (!s.references.empty() || !s.baseline) return s.references;
    SweepReference r;
    r.key = s.kind == sweep::Kind::truncate ? "full update" : "unedited";
    r.scores["score"] = *s.baseline;
    return {r};
}

// A reference's score on column `column`: its own value for that column, else its "score" when the
// sweep has one evaluation.
std::optional<double> reference_score(const SweepReference& r, const Sweep& s, const std::string& column) {
    if (auto it = r.scores.find(column); it != r.scores.end()) return it->second;
    if (s.score_columns.size() == 1)
        if (auto it = r.scores.find("score"); it != r.scores.end()) return it->second;
    return std::nullopt;
}

// The score of the whole delta: the "model" reference, summary.json's baseline, else the mean score
// at the largest x.
double truncation_reference(const Sweep& s) {
    for (const auto& r : s.references)
        if (r.key == "model" || r.key == "unedited" || r.key == "full")
            if (auto v = reference_score(r, s, s.score_columns[0]); v && *v != 0) return *v;
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

// Text labels placed inside a panel without overlapping one another: each goes to the first of its
// candidate positions whose box (text_width × one line) is free and inside the panel.
class LabelPlacer {
public:
    explicit LabelPlacer(const Frame& f) : frame_(f) {}
    struct Spot {
        double x, y;
        const char* anchor;
    };
    void place(Svg& svg, const std::string& text, const std::vector<Spot>& spots) {
        const Spot* chosen = &spots.front();
        for (const auto& sp : spots)
            if (free(box(text, sp))) {
                chosen = &sp;
                break;
            }
        taken_.push_back(box(text, *chosen));
        svg.text(chosen->x, chosen->y, text, kLabelFont, chosen->anchor);
    }

private:
    struct Box {
        double x0, y0, x1, y1;
    };
    static Box box(const std::string& text, const Spot& sp) {
        const double w = text_width(text, kLabelFont);
        const double x0 = std::string_view(sp.anchor) == "end" ? sp.x - w : sp.x;
        return {x0, sp.y - 0.8 * kLabelFont, x0 + w, sp.y + 0.2 * kLabelFont};
    }
    bool free(const Box& b) const {
        if (b.x0 < frame_.x || b.x1 > frame_.x + frame_.w || b.y0 < frame_.y || b.y1 > frame_.y + frame_.h)
            return false;
        return std::none_of(taken_.begin(), taken_.end(), [&](const Box& t) {
            return b.x0 < t.x1 && t.x0 < b.x1 && b.y0 < t.y1 && t.y0 < b.y1;
        });
    }
    Frame frame_;
    std::vector<Box> taken_;
};

// Spots around a mark at (x, y): above-right, above-left, below-right, below-left, right, left.
std::vector<LabelPlacer::Spot> spots_around(double x, double y) {
    return {{x + 6, y - 7, "start"}, {x - 6, y - 7, "end"},   {x + 6, y + 15, "start"},
            {x - 6, y + 15, "end"},  {x + 9, y + 4, "start"}, {x - 9, y + 4, "end"}};
}

struct RefLine {
    std::string label;
    double value;  // in the axis' units
};

// Horizontal (or, `vertical`, vertical) dotted lines across the panel, each labelled at its end;
// labels of lines closer than a text line are pushed apart so they never overlap.
void draw_reference_lines(Svg& svg, const Panel& p, std::vector<RefLine> refs, bool vertical) {
    const auto& f = p.frame;
    if (vertical) {
        for (const auto& r : refs) {
            const double x = p.px(r.value);
            svg.line(x, f.y, x, f.y + f.h, kReferenceColour, 1.2, "2 3");
            svg.text(x - 4, f.y + 4, r.label, kLabelFont, "end", -90);
        }
        return;
    }
    std::sort(refs.begin(), refs.end(), [](const RefLine& a, const RefLine& b) { return a.value > b.value; });
    double next_free = f.y + kLabelFont + 2;  // the highest baseline still free, going down
    for (const auto& r : refs) {
        const double y = p.py(r.value);
        svg.line(f.x, y, f.x + f.w, y, kReferenceColour, 1.2, "2 3");
        const double baseline = std::max(y - 4, next_free);
        svg.text(f.x + f.w - 4, baseline, r.label, kLabelFont, "end");
        next_free = baseline + kLabelFont + 3;
    }
}

// Whether `v` lies within the curves' range widened by half its span on each side (a flat range: by
// half its magnitude): near enough to draw on the same axis without squeezing the curves.
bool near(const Range& curves, double v) {
    if (curves.empty()) return true;
    const double span = curves.hi - curves.lo;
    const double pad = span > 0 ? 0.5 * span : 0.5 * std::max(std::abs(curves.hi), 1e-12);
    return v >= curves.lo - pad && v <= curves.hi + pad;
}

// References outside the axis, named at the top (above it) or bottom edge with an arrow.
void draw_off_scale(Svg& svg, const Panel& p, const std::vector<RefLine>& refs) {
    const auto& f = p.frame;
    double top = f.y + kLabelFont + 2, bottom = f.y + f.h - 4;
    for (const auto& r : refs) {
        const bool above = r.value > std::max(p.sy.d0, p.sy.d1);
        svg.text(f.x + f.w - 4, above ? top : bottom,
                 fmt::format("{} {} (off scale)", r.label, above ? "↑" : "↓"), kLabelFont, "end");
        if (above)
            top += kLabelFont + 3;
        else
            bottom -= kLabelFont + 3;
    }
}

// The y axis of a score: its key and direction ("perplexity (lower is better)"), or the column's name
// when the sweep has several evaluations.
std::string score_axis_label(const Sweep& s) {
    if (s.score_columns[0] == "score") return s.axis.label();
    ScoreAxis column = s.axis;  // the key's direction, under the column's name
    column.key = s.score_columns[0];
    return column.label();
}

std::string reference_label(const SweepReference& r, double value) {
    return fmt::format("{} {:.4g}", r.key, value);
}

// The trade-off plane of a two-evaluation interpolation: the mean path along ω, each seed's own path,
// and the references as lines on the axis of each evaluation they were scored on.
void draw_tradeoff(FigureContext& ctx, Svg& svg, const Frame& frame, const Sweep& s, ColourAssigner& colours,
                   const std::string& fig_id) {
    const auto refs = references_of(s);
    Axis x{s.score_columns[0], {}, false, {}, false}, y{s.score_columns[1], {}, false, {}, false};
    for (const auto& pt : s.points) {
        x.range.add(pt.scores[0]);
        y.range.add(pt.scores[1]);
    }
    std::vector<RefLine> hlines, vlines;
    std::vector<std::pair<std::string, Point>> marks;  // references scored on both evaluations
    for (const auto& r : refs) {
        const auto rx = reference_score(r, s, s.score_columns[0]),
                   ry = reference_score(r, s, s.score_columns[1]);
        if (rx) x.range.add(*rx);
        if (ry) y.range.add(*ry);
        if (rx && ry)
            marks.push_back({r.key, {*rx, *ry}});
        else if (rx)
            vlines.push_back({reference_label(r, *rx), *rx});
        else if (ry)
            hlines.push_back({reference_label(r, *ry), *ry});
        else
            ctx.note(fig_id, fmt::format("panel '{}', reference '{}'", s.name, r.key),
                     fmt::format("it has no score for {} or {} (only {})", s.score_columns[0],
                                 s.score_columns[1], r.scores.begin()->first));
    }
    const auto p = draw_axes(svg, frame, s.name, x, y);
    draw_reference_lines(svg, p, hlines, false);
    draw_reference_lines(svg, p, vlines, true);
    for (const auto& [key, pt] : marks) {
        const double cx = p.px(pt.x), cy = p.py(pt.y), r = 6;
        svg.polygon({{cx, cy - r}, {cx + r, cy}, {cx, cy + r}, {cx - r, cy}}, kReferenceColour, 0.9);
    }
    const auto& colour = colours(s.name);
    if (has_seeds(s)) {
        std::map<long long, std::vector<std::pair<double, Point>>> per_seed;
        for (const auto& pt : s.points) per_seed[pt.seed].push_back({pt.x, {pt.scores[0], pt.scores[1]}});
        svg.begin_group({{"class", "seed-lines"}, {"opacity", "0.45"}});
        for (auto& [seed, pts] : per_seed) {
            std::sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
            std::vector<Point> path;
            for (const auto& [w, pt] : pts) path.push_back(pt);
            draw_line(svg, p, path, colour, 0.8, "", fmt::format("{} · seed {}", s.name, seed));
        }
        svg.end_group();
    }
    std::map<double, std::pair<std::vector<double>, std::vector<double>>> by_w;
    for (const auto& pt : s.points) {
        by_w[pt.x].first.push_back(pt.scores[0]);
        by_w[pt.x].second.push_back(pt.scores[1]);
    }
    std::vector<Point> path;
    for (const auto& [w, sc] : by_w) path.push_back({mean_of(sc.first), mean_of(sc.second)});
    draw_line(svg, p, path, colour, 1.6);
    std::size_t k = 0;
    for (const auto& [w, sc] : by_w)
        draw_point(svg, p, path[k++], colour, 3.5,
                   fmt::format("ω = {:.3g}: {} {:.4g} ± {:.2g}, {} {:.4g} ± {:.2g} (n = {})", w,
                               s.score_columns[0], mean_of(sc.first), stddev_of(sc.first), s.score_columns[1],
                               mean_of(sc.second), stddev_of(sc.second), sc.first.size()));
    // The path's ends and the reference models, labelled where they do not cover one another.
    LabelPlacer labels(p.frame);
    if (!path.empty()) {
        labels.place(svg, "ω=" + tick_label(by_w.begin()->first, 0.1),
                     spots_around(p.px(path.front().x), p.py(path.front().y)));
        labels.place(svg, "ω=" + tick_label(by_w.rbegin()->first, 0.1),
                     spots_around(p.px(path.back().x), p.py(path.back().y)));
    }
    for (const auto& [key, pt] : marks)
        labels.place(svg, fmt::format("{} ({:.3g}, {:.3g})", key, pt.x, pt.y),
                     spots_around(p.px(pt.x), p.py(pt.y)));
}

// A figure's kind as its id and title spell it: the sweep's name, "sweep" for a generic one.
std::string kind_text(std::optional<sweep::Kind> kind) {
    return kind ? std::string(sweep::kind_name(*kind)) : std::string("sweep");
}

// Each figure's title and caption, by the kind of its sweeps (nullopt: a generic sweep).
struct SweepFigureText {
    std::optional<sweep::Kind> kind;
    std::string_view title, caption;
};
constexpr std::array<SweepFigureText, 4> kSweepFigures{{
    {sweep::Kind::rewind, "Head rewind",
     "Score against the fraction of attention heads (or, for a sweep with --unit experts, of routed "
     "experts) rewound to the base, one line per ordering (random orderings dashed)."},
    {sweep::Kind::interpolate, "Interpolation trade-off",
     "Score on one evaluation against the other along the interpolation "
     "(1 − ω)·W₁ + ω·W₂ (hover a point for ω), or the score against ω when the sweep "
     "has one evaluation."},
    {sweep::Kind::truncate, "SVD truncation of the update",
     "Score relative to the untruncated update (summary.json's 'model' reference, else its "
     "baseline, else the score at the largest fraction) against the fraction of the update's "
     "singular values kept (largest first)."},
    {std::nullopt, "Sweep", "Score against the swept parameter x."},
}};

Figure panels_figure(FigureContext& ctx, const std::vector<const Sweep*>& sweeps,
                     const SweepFigureText& text) {
    const auto kind = text.kind;
    const bool truncate = kind == sweep::Kind::truncate;
    const auto id = figure_id("sweep", kind_text(kind));
    const auto layout = grid_layout(static_cast<int>(sweeps.size()), 3, 320, 230, 170);
    Svg svg(layout.width(), layout.height(), "figure", kind_text(kind) + " sweeps");
    ColourAssigner colours(ctx.config.colours);
    std::vector<LegendEntry> legend;
    bool any_seeds = false, any_refs = false;
    for (std::size_t i = 0; i < sweeps.size(); ++i) {
        const auto& s = *sweeps[i];
        const auto frame = layout.frame(static_cast<int>(i));
        any_seeds |= has_seeds(s);
        any_refs |= !references_of(s).empty();
        if (kind == sweep::Kind::interpolate && s.score_columns.size() >= 2) {
            draw_tradeoff(ctx, svg, frame, s, colours, id);
            continue;
        }
        const auto curves = curves_of(s, 0);
        const double scale = truncate ? truncation_reference(s) : 1.0;
        const std::string x_label = kind == sweep::Kind::rewind && s.unit == edit::RewindUnit::experts
                                        ? "fraction of experts rewound"
                                    : kind ? std::string(sweep::kind_info(*kind).axis_label)
                                           : "x";
        Axis x{x_label, x_range(curves), false, {}, false};
        Axis y{truncate ? "relative " + s.axis.key + " (÷ full delta)" : score_axis_label(s),
               curve_range(curves, scale),
               false,
               {},
               false};
        // The axis is scaled to the curves: a reference far outside them (the base, scored an order of
        // magnitude away) would squeeze the curves into a sliver, so it is named at the panel's edge.
        const Range curves_only = y.range;
        std::vector<RefLine> lines, off_scale;
        for (const auto& r : references_of(s)) {
            if (const auto v = reference_score(r, s, s.score_columns[0])) {
                (near(curves_only, *v / scale) ? lines : off_scale)
                    .push_back({reference_label(r, *v), *v / scale});
                if (near(curves_only, *v / scale)) y.range.add(*v / scale);
            } else {
                ctx.note(id, fmt::format("panel '{}', reference '{}'", s.name, r.key),
                         fmt::format("it has no score for {}", s.score_columns[0]));
            }
        }
        if (truncate) y.range.add(1.0);
        const auto p = draw_axes(svg, frame, s.name, x, y);
        draw_off_scale(svg, p, off_scale);
        if (truncate && std::none_of(lines.begin(), lines.end(),
                                     [](const RefLine& l) { return std::abs(l.value - 1.0) < 1e-12; }))
            svg.line(frame.x, p.py(1.0), frame.x + frame.w, p.py(1.0), "#bbbbbb", 1, "2 3");
        draw_reference_lines(svg, p, lines, false);
        draw_curves(svg, p, s, curves, colours, scale, legend);
    }
    if (any_seeds) legend.push_back({"one seed", "#777777", LegendMark::thin});
    if (any_refs) legend.push_back({"reference", kReferenceColour, LegendMark::dotted});
    if (!legend.empty()) draw_legend(svg, layout.legend_x(), layout.margin_top + 4, legend, "ordering");
    const std::string title(text.title), caption(text.caption);
    return {
        id, title,
        caption +
            " Lines are the mean over seeds with a ±1 std band; thin faint lines are the individual seeds "
            "when there are several. Dotted labelled lines are the reference models evaluated once beside "
            "the sweep (summary.json's references: the base, the unedited model, the endpoints); one far "
            "outside "
            "the curves is named at the panel's edge (off scale), so that the curves keep the axis. The y "
            "axis "
            "names the score's key and, where known, its direction. Hover a point for n, spread and "
            "evaluation time.",
        svg.str()};
}

}  // namespace

void add_sweeps(FigureContext& ctx, std::vector<Figure>& out) {
    for (const auto& text : kSweepFigures) {
        std::vector<const Sweep*> sweeps;
        for (const auto& s : ctx.data.sweeps) {
            if (s.kind != text.kind) continue;
            if (s.points.empty())
                ctx.note(figure_id("sweep", kind_text(text.kind)), fmt::format("panel '{}'", s.name),
                         fmt::format("{} has no rows", s.source));
            else
                sweeps.push_back(&s);
        }
        if (!sweeps.empty()) out.push_back(panels_figure(ctx, sweeps, text));
    }
    if (ctx.data.sweeps.empty())
        ctx.notes.push_back(
            "sweep figures (rewind, interpolation, truncation): no curve.csv among the inputs");
}

}  // namespace diffract::report
