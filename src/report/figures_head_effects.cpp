// What rewinding single heads did: a rewind-each sweep's score change per head (layer-major order, one
// colour per layer), and a validation's change against each head's importance (the ranking's claim:
// the more important a head, the more rewinding it alone costs) beside its sets — the k least and k
// most important heads rewound together against the random sets matched to them. A mixture of experts'
// experts, rewound one at a time, get the same figures of their own.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

constexpr const char* kZeroColour = "#999999";

void zero_line(Svg& svg, const Panel& p) {
    svg.line(p.frame.x, p.py(0), p.frame.x + p.frame.w, p.py(0), kZeroColour, 1, "2 3");
}

std::string change_label(const ScoreAxis& a) {
    return "Δ " + a.label();
}  // short: axis titles are cut to fit

// Per head in layer-major order: its change, coloured by layer.
void draw_each(Svg& svg, const Frame& frame, const HeadEffects& e, ColourAssigner& colours) {
    const auto unit = edit::rewind_unit_words(e.unit).singular;
    auto heads = e.heads;
    std::sort(heads.begin(), heads.end(), [](const HeadEffect& a, const HeadEffect& b) {
        return std::pair(a.layer, a.head) < std::pair(b.layer, b.head);
    });
    Axis x{fmt::format("{} (layer-major order)", unit), {}, false, {}, false, true},
        y{change_label(e.axis), {}, false, {}, true};
    for (std::size_t i = 0; i < heads.size(); ++i)
        x.range.add(static_cast<double>(i)), y.range.add(heads[i].change);
    const auto p = draw_axes(svg, frame, e.name, x, y);
    zero_line(svg, p);
    for (std::size_t i = 0; i < heads.size(); ++i)
        draw_point(
            svg, p, {static_cast<double>(i), heads[i].change},
            colours(fmt::format("layer {}", heads[i].layer)), 3.5,
            fmt::format("layer {} {} {}: {:+.4g}", heads[i].layer, unit, heads[i].head, heads[i].change));
}

// The change of rewinding each head alone against its importance, the Spearman rho in the title.
void draw_validation(Svg& svg, const Frame& frame, const HeadEffects& e, ColourAssigner& colours) {
    const auto unit = edit::rewind_unit_words(e.unit).singular;
    Axis x{"importance", {}, false, {}, false}, y{change_label(e.axis), {}, false, {}, true};
    for (const auto& h : e.heads) x.range.add(h.importance), y.range.add(h.change);
    const auto title =
        e.spearman ? fmt::format("{}: Spearman {:.2f}{}", e.name, *e.spearman,
                                 e.ci_low ? fmt::format(" [{:.2f}, {:.2f}]", *e.ci_low, *e.ci_high) : "")
                   : e.name;
    const auto p = draw_axes(svg, frame, title, x, y);
    zero_line(svg, p);
    for (const auto& h : e.heads)
        draw_point(svg, p, {h.importance, h.change}, colours(fmt::format("layer {}", h.layer)), 3.5,
                   fmt::format("layer {} {} {}: importance {:.3g}, change {:+.4g}", h.layer, unit, h.head,
                               h.importance, h.change));
}

// The two sets (a diamond each) over the random sets matched to them (small points).
void draw_sets(Svg& svg, const Frame& frame, const HeadEffects& e) {
    Axis x{"", {}, false, {"least important", "most important"}, false},
        y{change_label(e.axis), {}, false, {}, true};
    for (const auto& s : e.sets) y.range.add(s.change);
    const auto p = draw_axes(
        svg, frame, fmt::format("{}: {} sets", e.name, edit::rewind_unit_words(e.unit).singular), x, y);
    zero_line(svg, p);
    for (const auto& s : e.sets) {
        const bool bottom = s.set.find("bottom") != std::string::npos;
        const double cx = bottom ? 0 : 1;
        if (s.set.rfind("random", 0) == 0) {
            draw_point(
                svg, p, {cx + 0.15, s.change}, "#888888", 3,
                fmt::format("random set matched to the {}: {:+.4g}", bottom ? "least" : "most", s.change),
                0.7);
        } else {
            const double px = p.px(cx - 0.1), py = p.py(s.change), r = 6;
            svg.polygon({{px, py - r}, {px + r, py}, {px, py + r}, {px - r, py}},
                        bottom ? "#1b9e77" : "#d95f02", 0.9);
        }
    }
}

// One legend entry per layer drawn (the points' colours).
void layer_legend(Svg& svg, const Layout& layout, const std::vector<const HeadEffects*>& effects,
                  ColourAssigner& colours) {
    std::vector<int> layers;
    for (const auto* e : effects)
        for (const auto& h : e->heads) layers.push_back(h.layer);
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    std::vector<LegendEntry> legend;
    for (int l : layers)
        legend.push_back(
            {fmt::format("layer {}", l), colours(fmt::format("layer {}", l)), LegendMark::point});
    draw_legend(svg, layout.legend_x(), layout.margin_top + 4, legend, "layer");
}

// The figures of one unit's rewind-each and validate sweeps.
void add_unit_effects(FigureContext& ctx, edit::RewindUnit unit, std::vector<Figure>& out) {
    const auto words = edit::rewind_unit_words(unit);
    const auto id = fmt::format("{}-effects", words.singular);
    std::vector<const HeadEffects*> each, validations;
    for (const auto& e : ctx.data.head_effects) {
        if (e.unit != unit) continue;
        if (e.heads.empty()) {
            ctx.note(figure_id(id, std::string(sweep::kind_name(e.kind))), fmt::format("panel '{}'", e.name),
                     fmt::format("{} has no rows", e.source));
            continue;
        }
        (e.kind == sweep::Kind::validate ? validations : each).push_back(&e);
    }
    const bool experts = unit == edit::RewindUnit::experts;
    ColourAssigner colours(ctx.config.colours);
    if (!each.empty()) {
        const auto layout = grid_layout(static_cast<int>(each.size()), 2, 420, 230, 120);
        Svg svg(layout.width(), layout.height(), "figure", fmt::format("single-{} rewinds", words.singular));
        for (std::size_t i = 0; i < each.size(); ++i)
            draw_each(svg, layout.frame(static_cast<int>(i)), *each[i], colours);
        layer_legend(svg, layout, each, colours);
        out.push_back(
            {figure_id(id, "rewind-each"), experts ? "Single-expert rewinds" : "Single-head rewinds",
             fmt::format("Change in the score when one {} is rewound to the base alone (rewind-each: "
                         "{}'s delta), {} in layer-major order, coloured by layer; the dotted line "
                         "is no change. Hover a point for its layer, {} and change.",
                         experts ? "expert (every matrix of it)" : "attention head",
                         sweep::unit_table_file(sweep::Kind::rewind_each, unit), words.plural,
                         words.singular),
             svg.str()});
    }
    if (validations.empty()) return;
    const auto layout = grid_layout(static_cast<int>(2 * validations.size()), 2, 320, 230, 120);
    Svg svg(layout.width(), layout.height(), "figure", "ranking validation");
    std::string verdicts;
    for (std::size_t i = 0; i < validations.size(); ++i) {
        draw_validation(svg, layout.frame(static_cast<int>(2 * i)), *validations[i], colours);
        draw_sets(svg, layout.frame(static_cast<int>(2 * i + 1)), *validations[i]);
        for (const auto& v : validations[i]->verdict)
            verdicts += fmt::format(" {}: {}.", validations[i]->name, v);
    }
    layer_legend(svg, layout, validations, colours);
    out.push_back(
        {figure_id(id, "validate"),
         fmt::format("Does the {} ranking predict what rewinding does?", words.singular),
         fmt::format(
             "Left: the change in the score when each {0} is rewound alone against its importance (the "
             "ranking claims that more important {1} cost more), the Spearman rho and its 95% bootstrap "
             "interval in the title. Right: the k least (green) and k most (orange) important {1} "
             "rewound together, each beside the random sets matched to it in {2} (grey). The verdict "
             "of sweep validate:",
             words.singular, words.plural,
             experts ? "experts and weight" : "query heads, K/V blocks and weight") +
             verdicts,
         svg.str()});
}

}  // namespace

void add_head_effects(FigureContext& ctx, std::vector<Figure>& out) {
    for (const auto unit : {edit::RewindUnit::heads, edit::RewindUnit::experts})
        add_unit_effects(ctx, unit, out);
}

}  // namespace diffract::report
