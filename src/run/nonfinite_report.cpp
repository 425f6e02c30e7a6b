#include "nonfinite_report_impl.hpp"

#include "diffract/core/nonfinite.hpp"

namespace diffract::run {

void NonfiniteReport::add(const TensorInfo& tensor, const MatrixBlock& block, bool head, std::int64_t count) {
    const auto [it, fresh] = index_.try_emplace(&tensor, entries_.size());
    if (fresh) entries_.push_back({&tensor, {}, {}});
    auto& e = entries_[it->second];
    (head ? e.heads : e.whole)[{block.row0, block.rows, block.col0, block.cols}] = count;
}

std::vector<std::string> NonfiniteReport::warnings() const {
    std::vector<std::string> out;
    for (const auto& e : entries_) {
        std::int64_t whole = 0, heads = 0;
        for (const auto& [block, n] : e.whole) whole += n;
        for (const auto& [block, n] : e.heads) heads += n;
        const std::int64_t n = e.whole.empty() ? heads : whole;
        if (n > 0) out.push_back(nonfinite_warning(e.tensor->path(), e.tensor->name, n));
    }
    return out;
}

}  // namespace diffract::run
