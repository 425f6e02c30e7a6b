// The spectrum of each update ΔW = W_model − W_base (the store's delta_svals, kept by compare): per
// compared model, one column of panels per role, the normalised singular values σ_i/σ_1 (log scale,
// top row) and the cumulative energy Σ_{j≤i} σ_j² / ‖ΔW‖²_F (bottom row) against the fraction of
// components i/k, one line per layer on a colour ramp. The bottom row is what an SVD truncation of
// the update keeps; it is the basis of the truncation-redundancy figure.
#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

constexpr int kMaxPoints = 200;   // per line: a 4096-component update needs no more on a 260 px axis
constexpr double kNoise = 1e-12;  // σ_i/σ_1 below this is round-off of a zero component

// The component indices drawn: the first few (the top of the spectrum) and evenly spaced ones.
std::vector<std::size_t> drawn_indices(std::size_t k) {
    std::set<std::size_t> idx;
    for (std::size_t i = 0; i < std::min<std::size_t>(k, 8); ++i) idx.insert(i);
    for (int j = 0; j < kMaxPoints && k > 1; ++j)
        idx.insert(static_cast<std::size_t>(
            std::lround(static_cast<double>(j) * static_cast<double>(k - 1) / (kMaxPoints - 1))));
    if (k == 1) idx.insert(0);
    return {idx.begin(), idx.end()};
}

struct Lines {
    std::vector<Point> normalised, energy;
    double half_energy_at = NAN, energy90_at = NAN;  // the fraction holding 50 % / 90 % of ‖ΔW‖²_F
};

Lines lines_of(const DeltaSpectrum& d) {
    std::vector<double> s(d.svals.rbegin(), d.svals.rend());  // descending
    Lines out;
    const std::size_t k = s.size();
    double total = 0;
    for (double v : s) total += v * v;
    if (k == 0 || !(s[0] > 0) || !(total > 0)) return out;
    std::vector<double> cum(k);
    double run = 0;
    for (std::size_t i = 0; i < k; ++i) {
        run += s[i] * s[i];
        cum[i] = run / total;
        const double frac = static_cast<double>(i + 1) / static_cast<double>(k);
        if (std::isnan(out.half_energy_at) && cum[i] >= 0.5) out.half_energy_at = frac;
        if (std::isnan(out.energy90_at) && cum[i] >= 0.9) out.energy90_at = frac;
    }
    for (auto i : drawn_indices(k)) {
        const double frac = static_cast<double>(i + 1) / static_cast<double>(k);
        const double r = s[i] / s[0];
        out.normalised.push_back({frac, r > kNoise ? r : NAN});
        out.energy.push_back({frac, cum[i]});
    }
    return out;
}

std::string joined(const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "none" : s;
}

Figure delta_figure(FigureContext& ctx, const std::string& model,
                    const std::vector<const DeltaSpectrum*>& deltas) {
    const auto id = figure_id("delta-spectrum", model);
    std::vector<std::string> names;
    Range layers;
    for (const auto* d : deltas) {
        names.push_back(d->role);
        layers.add(static_cast<double>(*d->layer));
    }
    const auto roles = roles_of(ctx, names);
    note_missing_roles(ctx, id, roles, "delta_svals");
    const int n = static_cast<int>(roles.size());
    const auto layout = grid_layout(2 * n, n, 260, 200, 110);
    Svg svg(layout.width(), layout.height(), "figure", "spectrum of the update of " + model);
    const auto ramp = make_colour_map(ColourMapKind::sequential, layers.lo, layers.hi);
    std::string base;
    for (std::size_t c = 0; c < roles.size(); ++c) {
        std::vector<std::pair<const DeltaSpectrum*, Lines>> drawn;
        Axis xa{"fraction of components i/k", {}, false, {}, false};
        Axis top{"σᵢ / σ₁ (log scale)", {}, true, {}, false},
            bottom{"cumulative energy", {}, false, {}, true};
        xa.range.add(0.0);
        xa.range.add(1.0);
        bottom.range.add(1.0);
        for (const auto* d : deltas) {
            if (d->role != roles[c]) continue;
            drawn.emplace_back(d, lines_of(*d));
            base = d->base;
            for (const auto& pt : drawn.back().second.normalised) top.range.add(pt.y);
        }
        std::sort(drawn.begin(), drawn.end(),
                  [](const auto& a, const auto& b) { return *a.first->layer < *b.first->layer; });
        const auto pt = draw_axes(svg, layout.frame(static_cast<int>(c)), roles[c], xa, top);
        const auto pb = draw_axes(svg, layout.frame(n + static_cast<int>(c)), roles[c], xa, bottom);
        for (const auto& [d, l] : drawn) {
            const auto colour = ramp.at(static_cast<double>(*d->layer));
            const auto tip = fmt::format(
                "layer {} · {}: k = {}, 50 % of ‖ΔW‖²_F in the top {:.3g}, 90 % in the top {:.3g}", *d->layer,
                d->tensor, d->svals.size(), l.half_energy_at, l.energy90_at);
            draw_line(svg, pt, l.normalised, colour, 1.4, "", tip);
            draw_line(svg, pb, l.energy, colour, 1.4, "", tip);
        }
    }
    draw_colour_bar(svg, layout.legend_x() + 2, layout.margin_top + 14, layout.panel_h, ramp, "layer");
    return {
        id, fmt::format("Spectrum of the update ΔW = {} − {}", model, base),
        fmt::format("Singular values of each update ΔW = W_{0} − W_{1} (compare's delta_svals), one column "
                    "per role, one line per layer (colour: layer). Top: σᵢ/σ₁ against the fraction of "
                    "components i/k (log scale; a flat curve is a full-rank update, a steep one a "
                    "low-rank one). Bottom: the cumulative energy (σ₁² + … + σᵢ²)/‖ΔW‖²_F, the share of the "
                    "update an SVD truncation keeping that fraction retains (the truncation sweep's x "
                    "axis). Hover a line for its layer and the fractions holding 50 % and 90 % of the "
                    "energy.",
                    model, base),
        svg.str()};
}

}  // namespace

void add_delta_spectra(FigureContext& ctx, std::vector<Figure>& out) {
    // The compared models: every model of a compare row or with a stored update.
    std::vector<std::string> expected;
    const auto expect = [&](const std::string& m) {
        if (ctx.model_selected(m) && std::find(expected.begin(), expected.end(), m) == expected.end())
            expected.push_back(m);
    };
    for (const auto& r : ctx.data.compare) expect(r.model);
    for (const auto& d : ctx.data.deltas) expect(d.model);
    if (expected.empty()) {
        ctx.note("delta-spectrum", "",
                 "no compare results among the inputs (run `diffract compare` with a store)");
        return;
    }
    std::vector<std::string> holders;
    for (const auto& d : ctx.data.deltas)
        if (std::find(holders.begin(), holders.end(), d.model) == holders.end()) holders.push_back(d.model);
    for (const auto& m : ctx.models) {
        if (std::find(expected.begin(), expected.end(), m) == expected.end()) continue;
        std::vector<const DeltaSpectrum*> mine;
        for (const auto& d : ctx.data.deltas)
            if (d.model == m && d.layer && ctx.layer_selected(d.layer) && ctx.role_selected(d.role))
                mine.push_back(&d);
        const auto id = figure_id("delta-spectrum", m);
        if (mine.empty()) {
            ctx.note(
                id, fmt::format("model '{}'", m),
                !ctx.data.store_loaded
                    ? "no results store among the inputs (delta_svals live only in the store: give --store)"
                    : fmt::format("the store has no delta_svals of a layer matrix for model '{}' (it holds "
                                  "them for: {}; run `diffract compare` again with this store)",
                                  m, joined(holders)));
            continue;
        }
        out.push_back(delta_figure(ctx, m, mine));
    }
}

}  // namespace diffract::report
