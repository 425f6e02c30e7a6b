#include "diffract/report/series.hpp"

#include <algorithm>
#include <numeric>
#include <regex>

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
    const std::string s(name);
    static const std::regex step(R"((?:step|checkpoint|ckpt|iter)[-_]?(\d+))", std::regex::icase);
    static const std::regex tokens(
        R"((?:tokens?[-_]?(\d+(?:\.\d+)?)([kmbtg])?)|(?:(\d+(?:\.\d+)?)([kmbtg])(?:[-_]?tok(?:ens?)?)?(?![a-z])))",
        std::regex::icase);
    std::smatch m;
    if (std::regex_search(s, m, step)) return StepKey{std::stod(m[1].str()), "step"};
    if (std::regex_search(s, m, tokens)) {
        if (m[1].matched) return StepKey{std::stod(m[1].str()) * unit_scale(m[2].str()), "tokens"};
        return StepKey{std::stod(m[3].str()) * unit_scale(m[4].str()), "tokens"};
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
