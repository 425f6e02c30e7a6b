#include "diffract/report/series.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

namespace diffract::report {

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
