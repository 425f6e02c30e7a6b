#include "diffract/core/step_name.hpp"

#include <charconv>
#include <cstdlib>
#include <vector>

#include "diffract/core/pattern.hpp"

namespace diffract {
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
    if (step.search(name, m)) {
        StepKey key{std::strtod(m[0].c_str(), nullptr), "step"};
        std::int64_t exact = 0;
        const auto [end, err] = std::from_chars(m[0].data(), m[0].data() + m[0].size(), exact);
        if (err == std::errc() && end == m[0].data() + m[0].size()) key.exact = exact;
        return key;
    }
    if (tokens.search(name, m)) {
        if (!m[0].empty()) return StepKey{std::strtod(m[0].c_str(), nullptr) * unit_scale(m[1]), "tokens"};
        return StepKey{std::strtod(m[2].c_str(), nullptr) * unit_scale(m[3]), "tokens"};
    }
    return std::nullopt;
}

}  // namespace diffract
