// Summary statistics of the figures (NaNs are ignored throughout).
#pragma once

#include <vector>

namespace diffract::report {

std::vector<double> finite_values(const std::vector<double>& v);
double mean_of(const std::vector<double>& v);
double stddev_of(const std::vector<double>& v);       // population; 0 for one value
double quantile_of(std::vector<double> v, double q);  // linear interpolation
inline double median_of(const std::vector<double>& v) { return quantile_of(v, 0.5); }

}  // namespace diffract::report
