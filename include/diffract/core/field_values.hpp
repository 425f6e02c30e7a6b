// The values one computation produced for one matrix, head block or pair: named scalars and named
// vectors. The plain result an analysis returns, the store keeps and the run layer gathers across ranks,
// so it lives at the bottom: no layer needs another to pass it on.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace diffract {

struct FieldValues {
    std::map<std::string, double> scalars;
    std::map<std::string, std::vector<double>> vectors;
};

}  // namespace diffract
