// Colours: a categorical palette (Okabe–Ito, distinguishable with colour-vision deficiencies) with
// user overrides, and continuous colour maps for heatmaps (sequential viridis, diverging blue–red).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace diffract::report {

// The i-th colour of the categorical palette (cycles).
const std::string& palette_colour(std::size_t i);

// Assigns each name a colour: an override if given, else the next palette colour in order of first
// request, so a model keeps its colour across every figure of a report.
class ColourAssigner {
public:
    explicit ColourAssigner(std::map<std::string, std::string> overrides = {});
    const std::string& operator()(const std::string& name);

private:
    std::map<std::string, std::string> assigned_;
    std::size_t next_ = 0;
};

// Checks a colour given by a user: #rgb, #rrggbb or a CSS name of letters only. Throws InputError.
void check_colour(const std::string& colour, const std::string& context);

enum class ColourMapKind { sequential, diverging };

struct ColourMap {
    ColourMapKind kind = ColourMapKind::sequential;
    double lo = 0, hi = 1;  // diverging maps are symmetric: lo = -hi
    // Runs the colours from hi to lo: a figure whose low values mean "changed more" (agreement) gives
    // them the colour that high values have where high means changed more (update norms).
    bool reversed = false;
    // "#rrggbb"; NaN maps to light grey.
    std::string at(double v) const;
};

// A map over [lo, hi]; a diverging one is centred on 0 and spans ±max(|lo|, |hi|).
ColourMap make_colour_map(ColourMapKind kind, double lo, double hi, bool reversed = false);

}  // namespace diffract::report
