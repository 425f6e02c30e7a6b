// The ESD of one matrix per model: a histogram of λ = σ²/N on log-spaced bins (density per unit
// log10 λ), the fitted Marchenko–Pastur density (from mp_bulk_std and aspect_ratio, integrated
// through its CDF) and the fitted power-law tail (pl_alpha above pl_esd_xmin).
#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "diffract/analysis/spectral_fits.hpp"
#include "diffract/model/schema.hpp"
#include "figure_util_impl.hpp"

namespace diffract::report {
namespace {

constexpr int kBins = 40;
constexpr int kCurvePoints = 160;
const double kLn10 = std::log(10.0);

double field(const Spectrum& s, const char* name) {
    const auto it = s.values.find(name);
    return it == s.values.end() ? NAN : it->second;
}

// The tensor to show: the configured one, else attn_q of the middle layer, else the first spectrum.
std::string pick_tensor(const FigureContext& ctx, const std::vector<const Spectrum*>& spectra) {
    if (!ctx.config.esd_tensor.empty()) return ctx.config.esd_tensor;
    std::vector<std::pair<int, std::string>> q;
    for (const auto* s : spectra) {
        const auto tr = model::classify_tensor(s->tensor);
        if (tr.role == model::Role::attn_q && tr.layer) q.emplace_back(*tr.layer, s->tensor);
    }
    if (q.empty()) return spectra.front()->tensor;
    std::sort(q.begin(), q.end());
    return q[q.size() / 2].second;
}

void draw_spectrum(Svg& svg, const Frame& frame, const Spectrum& s, const std::string& colour) {
    const double n = field(s, "greater_dim");
    std::vector<double> esd;
    for (double v : s.svals)
        if (v > 0) esd.push_back(v * v / n);
    std::sort(esd.begin(), esd.end());
    if (esd.empty() || !(n > 0)) {
        draw_empty_note(svg, frame, s.model, "no positive singular values");
        return;
    }
    const double lo = std::log10(esd.front()), hi = std::log10(esd.back()) + 1e-9;
    const double width = std::max((hi - lo) / kBins, 1e-6);
    std::vector<double> edges, heights(kBins, 0.0);
    for (int i = 0; i <= kBins; ++i) edges.push_back(std::pow(10.0, lo + i * width));
    for (double e : esd) heights[std::min(kBins - 1, static_cast<int>((std::log10(e) - lo) / width))] += 1;
    for (auto& h : heights) h /= static_cast<double>(esd.size()) * width;

    // MP: mass between grid points from its CDF; ratio = 1/Q (lower/greater dimension).
    const double q = field(s, "aspect_ratio"), sigma = field(s, "mp_bulk_std");
    std::vector<Point> mp;
    if (q >= 1 && sigma > 0) {
        const double ratio = 1.0 / q, sy = std::sqrt(ratio);
        const double a = sigma * sigma * (1 - sy) * (1 - sy), b = sigma * sigma * (1 + sy) * (1 + sy);
        const double la = std::log10(std::max(a, b * 1e-6)), lb = std::log10(b);
        const double step = (lb - la) / kCurvePoints;
        for (int i = 0; i < kCurvePoints; ++i) {
            const double x0 = std::pow(10.0, la + i * step), x1 = std::pow(10.0, la + (i + 1) * step);
            const double mass = analysis::marchenko_pastur_cdf(x1, ratio, sigma) -
                                analysis::marchenko_pastur_cdf(x0, ratio, sigma);
            mp.push_back({std::sqrt(x0 * x1), mass / step});
        }
    }
    // Power law: density α−1/x_min (λ/x_min)^−α on the tail's share of the eigenvalues, per log10 λ.
    const double alpha = field(s, "pl_alpha"), xmin = field(s, "pl_esd_xmin");
    std::vector<Point> pl;
    if (alpha > 1 && xmin > 0) {
        const double share = static_cast<double>(esd.end() - std::lower_bound(esd.begin(), esd.end(), xmin)) /
                             static_cast<double>(esd.size());
        const double l0 = std::log10(xmin), l1 = std::log10(esd.back());
        for (int i = 0; i <= kCurvePoints / 2; ++i) {
            const double x = std::pow(10.0, l0 + (l1 - l0) * i / (kCurvePoints / 2));
            pl.push_back({x, share * (alpha - 1) / xmin * std::pow(x / xmin, -alpha) * x * kLn10});
        }
    }
    Axis xa{"eigenvalue λ = σ²/N (log scale)", {}, true, {}, false},
        ya{"density per log₁₀ λ", {}, false, {}, true};
    xa.range.add(esd.front());
    xa.range.add(esd.back());
    ya.range.add(heights);
    for (const auto& pt : mp) {
        xa.range.add(pt.x);
        ya.range.add(std::min(pt.y, 2 * *std::max_element(heights.begin(), heights.end())));
    }
    const auto p = draw_axes(svg, frame, s.model, xa, ya);
    draw_histogram(svg, p, edges, heights, colour);
    std::vector<Point> mp_clipped;
    for (auto pt : mp) mp_clipped.push_back({pt.x, std::min(pt.y, p.sy.d1)});
    draw_line(svg, p, mp_clipped, "#222222", 1.8, "",
              fmt::format("Marchenko–Pastur, bulk σ = {:.4g}, Q = {:.3g}", sigma, q));
    for (auto& pt : pl) pt.y = std::min(pt.y, p.sy.d1);  // the tail's head would leave the panel
    draw_line(svg, p, pl, "#D55E00", 2.0, "6 3",
              fmt::format("power law α = {:.3g}, x_min = {:.3g}", alpha, xmin));
    if (xmin > 0) svg.line(p.px(xmin), p.frame.y, p.px(xmin), p.frame.y + p.frame.h, "#D55E00", 1, "2 3");
}

// The models whose ESD panel is expected: the bases of the comparisons first (the pre-trained
// spectrum the others are read against), then the selected models.
std::vector<std::string> esd_models(const FigureContext& ctx) {
    std::vector<std::string> out;
    if (ctx.config.models.empty())
        for (const auto& r : ctx.data.compare)
            if (!r.base.empty() && std::find(out.begin(), out.end(), r.base) == out.end())
                out.push_back(r.base);
    for (const auto& m : ctx.models)
        if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
    return out;
}

std::string joined(const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "none" : s;
}

}  // namespace

void add_esd(FigureContext& ctx, std::vector<Figure>& out) {
    const auto models = esd_models(ctx);
    std::vector<const Spectrum*> spectra;
    std::vector<std::string> holders;  // models with any weights_svals
    for (const auto& s : ctx.data.spectra) {
        if (std::find(holders.begin(), holders.end(), s.model) == holders.end()) holders.push_back(s.model);
        if (std::find(models.begin(), models.end(), s.model) != models.end()) spectra.push_back(&s);
    }
    if (spectra.empty()) {
        ctx.note("esd", "",
                 ctx.data.store_loaded
                     ? fmt::format("the store has no weights_svals for {} (it holds weights_svals for: {}; "
                                   "analyze the models with --store, or name them as the store does)",
                                   joined(models), joined(holders))
                     : "no singular values (give the results store with --store, or analyze with the default "
                       "store present)");
        return;
    }
    const auto tensor = pick_tensor(ctx, spectra);
    const auto id = figure_id("esd", tensor);
    std::vector<const Spectrum*> shown;
    for (const auto& m : models) {
        const Spectrum* found = nullptr;
        bool any_of_model = false;
        for (const auto* s : spectra) {
            any_of_model |= s->model == m;
            if (s->model == m && s->tensor == tensor) {
                found = s;
                break;
            }
        }
        if (found) {
            shown.push_back(found);
            continue;
        }
        ctx.note(id, fmt::format("panel '{}'", m),
                 any_of_model ? fmt::format("the store has no weights_svals of {} for model '{}'", tensor, m)
                              : fmt::format("the store has no weights_svals for model '{}' (it holds: {})", m,
                                            joined(holders)));
    }
    if (shown.empty()) return;
    const auto layout = grid_layout(static_cast<int>(shown.size()), 4, 260, 200, 170);
    Svg svg(layout.width(), layout.height(), "figure", "ESD of " + tensor);
    for (std::size_t i = 0; i < shown.size(); ++i)
        draw_spectrum(svg, layout.frame(static_cast<int>(i)), *shown[i], ctx.colours(shown[i]->model));
    draw_legend(svg, layout.legend_x(), layout.margin_top + 4,
                {{"ESD histogram", "#888888", LegendMark::band},
                 {"Marchenko–Pastur fit", "#222222", LegendMark::line},
                 {"power-law tail fit", "#D55E00", LegendMark::dashed}});
    out.push_back(
        {id, fmt::format("ESD of {}", tensor),
         fmt::format("Empirical spectral density of {} per model: eigenvalues λ = σ²/N of WᵀW/N on "
                     "log-spaced bins (density per unit log₁₀ λ), the Marchenko–Pastur density with the "
                     "fitted bulk σ (mp_bulk_std) and aspect ratio, and the power-law tail fitted above "
                     "x_min (pl_alpha, pl_esd_xmin; dotted line). Hover a curve for its parameters.",
                     tensor),
         svg.str()});
}

}  // namespace diffract::report
