// The warnings of analyze and compare about matrices with non-finite entries: one line per stored
// tensor (its file and name) whatever the number of its blocks, models or bases it appears in.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "diffract/core/matrix.hpp"

namespace diffract::run {

class NonfiniteReport {
public:
    // A block added twice (the base of several models) counts once. `head`: a head block, counted
    // only for a tensor without a whole matrix among its units.
    void add(const TensorInfo& tensor, const MatrixBlock& block, bool head, std::int64_t count);
    // nonfinite_warning lines, in the order the tensors were first added; none for clean tensors.
    std::vector<std::string> warnings() const;

private:
    using Region = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
    struct Entry {
        const TensorInfo* tensor = nullptr;
        std::map<Region, std::int64_t> whole, heads;
    };
    std::vector<Entry> entries_;
    std::map<const TensorInfo*, std::size_t> index_;
};

}  // namespace diffract::run
