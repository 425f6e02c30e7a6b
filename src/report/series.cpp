#include "diffract/report/series.hpp"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "diffract/core/pattern.hpp"

namespace diffract::report {
namespace {

double unit_scale(const std::string& suffix) {
    if (suffix.empty()) return 1;
    switch (suffix[0]) {
        case 'k':
        case 'K':
            return 1e3;
        case 'm':
        case 'M':
            return 1e6;
        case 'b':
        case 'B':
        case 'g':
        case 'G':
            return 1e9;
        case 't':
        case 'T':
            return 1e12;
        default:
            return 1;
    }
}

}  // namespace

std::optional<StepKey> parse_step(std::string_view name) {
    // RE2 has no lookahead: "not followed by a letter" is a following non-letter or the end.
    static const Pattern step(R"((?:step|checkpoint|ckpt|iter)[-_]?(\d+))", "step key", true);
    static const Pattern tokens(
        R"((?:tokens?[-_]?(\d+(?:\.\d+)?)([kmbtg])?)|(?:(\d+(?:\.\d+)?)([kmbtg])(?:[-_]?tok(?:ens?)?)?(?:[^a-z]|$)))",
        "token key", true);
    std::vector<std::string> m;
    if (step.search(name, m)) return StepKey{std::strtod(m[0].c_str(), nullptr), "step"};
    if (tokens.search(name, m)) {
        if (!m[0].empty()) return StepKey{std::strtod(m[0].c_str(), nullptr) * unit_scale(m[1]), "tokens"};
        return StepKey{std::strtod(m[2].c_str(), nullptr) * unit_scale(m[3]), "tokens"};
    }
    return std::nullopt;
}

Series order_series(const std::vector<std::string>& models) {
    Series s;
    std::vector<std::optional<StepKey>> keys;
    for (const auto& m : models) keys.push_back(parse_step(m));
    const bool all = !keys.empty() && std::all_of(keys.begin(), keys.end(), [&](const auto& k) {
        return k && k->unit == keys.front()->unit;
    });
    std::vector<std::size_t> idx(models.size());
    std::iota(idx.begin(), idx.end(), 0);
    if (all)
        std::stable_sort(idx.begin(), idx.end(),
                         [&](auto a, auto b) { return keys[a]->value < keys[b]->value; });
    for (std::size_t i = 0; i < idx.size(); ++i) {
        s.models.push_back(models[idx[i]]);
        s.x.push_back(all ? keys[idx[i]]->value : static_cast<double>(i));
    }
    s.from_names = all;
    s.axis_label = !all                           ? "checkpoint (input order)"
                   : keys.front()->unit == "step" ? "training step"
                                                  : "tokens seen";
    return s;
}

}  // namespace diffract::report
