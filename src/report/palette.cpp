#include "diffract/report/palette.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract::report {
namespace {

struct Rgb {
    double r, g, b;
};

// Stops of matplotlib's viridis and of ColorBrewer's RdBu (reversed: blue negative, red positive).
constexpr std::array<Rgb, 5> kViridis{
    {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
constexpr std::array<Rgb, 5> kBlueRed{
    {{33, 102, 172}, {146, 197, 222}, {247, 247, 247}, {244, 165, 130}, {178, 24, 43}}};

template <std::size_t N>
std::string interpolate(const std::array<Rgb, N>& stops, double t) {
    t = std::clamp(t, 0.0, 1.0) * static_cast<double>(N - 1);
    const auto i = std::min(static_cast<std::size_t>(t), N - 2);
    const double f = t - static_cast<double>(i);
    const auto mix = [&](double a, double b) { return static_cast<int>(std::lround(a + (b - a) * f)); };
    return fmt::format("#{:02x}{:02x}{:02x}", mix(stops[i].r, stops[i + 1].r),
                       mix(stops[i].g, stops[i + 1].g), mix(stops[i].b, stops[i + 1].b));
}

}  // namespace

const std::string& palette_colour(std::size_t i) {
    static const std::array<std::string, 10> kPalette{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                                      "#56B4E9", "#000000", "#F0E442", "#882255", "#999999"};
    return kPalette[i % kPalette.size()];
}

ColourAssigner::ColourAssigner(std::map<std::string, std::string> overrides)
    : assigned_(std::move(overrides)) {}

const std::string& ColourAssigner::operator()(const std::string& name) {
    auto it = assigned_.find(name);
    if (it == assigned_.end()) it = assigned_.emplace(name, palette_colour(next_++)).first;
    return it->second;
}

void check_colour(const std::string& colour, const std::string& context) {
    const bool hex =
        colour.size() > 1 && colour[0] == '#' && (colour.size() == 4 || colour.size() == 7) &&
        std::all_of(colour.begin() + 1, colour.end(), [](unsigned char c) { return std::isxdigit(c); });
    const bool named = !colour.empty() && std::all_of(colour.begin(), colour.end(),
                                                      [](unsigned char c) { return std::isalpha(c); });
    if (!hex && !named)
        throw InputError(
            fmt::format("{}: colour '{}' is not #rgb, #rrggbb or a CSS colour name", context, colour));
}

std::string ColourMap::at(double v) const {
    if (!std::isfinite(v)) return "#dddddd";
    const double span = hi - lo;
    const double up = span > 0 ? (v - lo) / span : 0.5;
    const double t = reversed ? 1 - up : up;
    return kind == ColourMapKind::sequential ? interpolate(kViridis, t) : interpolate(kBlueRed, t);
}

ColourMap make_colour_map(ColourMapKind kind, double lo, double hi, bool reversed) {
    if (!std::isfinite(lo) || !std::isfinite(hi)) lo = hi = 0;
    if (kind == ColourMapKind::diverging) {
        const double m = std::max({std::abs(lo), std::abs(hi), 1e-12});
        return {kind, -m, m, reversed};
    }
    return {kind, lo, hi, reversed};
}

}  // namespace diffract::report
