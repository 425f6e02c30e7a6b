#include <algorithm>
#include <numeric>

#include "diffract/run/distributed.hpp"

namespace diffract::run {

std::vector<std::vector<std::size_t>> assign_tasks(const std::vector<TaskCost>& costs,
                                                   const std::vector<char>& needed) {
    const auto& d = distributed();
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < costs.size(); ++i)
        if (needed[i]) order.push_back(i);
    // Longest first, each to the least-loaded rank: within 4/3 of the optimal makespan.
    std::stable_sort(order.begin(), order.end(),
                     [&](auto a, auto b) { return costs[a].cost > costs[b].cost; });
    std::vector<double> load(static_cast<std::size_t>(d.size), 0.0);
    std::vector<std::vector<std::size_t>> shares(load.size());
    for (auto i : order) {
        const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        load[r] += costs[i].cost;
        shares[r].push_back(i);
    }
    return shares;
}

}  // namespace diffract::run
