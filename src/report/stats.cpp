#include "diffract/report/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "diffract/core/numbers.hpp"

namespace diffract::report {
namespace {}

std::vector<double> finite_values(const std::vector<double>& v) {
    std::vector<double> out;
    std::copy_if(v.begin(), v.end(), std::back_inserter(out), [](double x) { return std::isfinite(x); });
    return out;
}

double mean_of(const std::vector<double>& v) {
    const auto f = finite_values(v);
    if (f.empty()) return kNaN;
    double s = 0;
    for (double x : f) s += x;
    return s / static_cast<double>(f.size());
}

double stddev_of(const std::vector<double>& v) {
    const auto f = finite_values(v);
    if (f.empty()) return kNaN;
    const double m = mean_of(f);
    double s = 0;
    for (double x : f) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(f.size()));
}

double quantile_of(std::vector<double> v, double q) {
    v = finite_values(v);
    if (v.empty()) return kNaN;
    std::sort(v.begin(), v.end());
    const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
    const auto i = static_cast<std::size_t>(pos);
    if (i + 1 >= v.size()) return v.back();
    return v[i] + (v[i + 1] - v[i]) * (pos - static_cast<double>(i));
}

}  // namespace diffract::report
