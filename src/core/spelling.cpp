#include "diffract/core/spelling.hpp"

#include <algorithm>

namespace diffract {

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i)
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[a.size()][b.size()];
}

std::string closest_spelling(std::string_view word, const std::vector<std::string>& candidates,
                             std::size_t max_distance) {
    // Names are short; a long word (a 50,000-character path) is compared only by its prefix rule.
    constexpr std::size_t kLongest = 256;
    std::string best;
    std::size_t best_distance = max_distance + 1;
    for (const auto& c : candidates) {
        std::size_t d = word.size() >= 3 && std::string_view(c).starts_with(word) ? 1 : best_distance;
        if (d > 1 && word.size() <= kLongest && c.size() <= kLongest) d = std::min(d, edit_distance(word, c));
        if (d < best_distance) best_distance = d, best = c;
    }
    return best;
}

}  // namespace diffract
