#include "diffract/linalg/gram_batch.hpp"

#include <algorithm>
#include <cmath>

namespace diffract::linalg {

std::vector<GramBatch> plan_gram_batches(std::span<const MatrixBlock> blocks, std::int64_t stored_cols) {
    auto offset_of = [&](std::size_t i) { return blocks[i].row0 * stored_cols + blocks[i].col0; };
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < blocks.size(); ++i)
        if (blocks[i].rows > 0 && blocks[i].cols > 0) order.push_back(i);
    // Same shape together, then by position in memory.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (blocks[a].rows != blocks[b].rows) return blocks[a].rows < blocks[b].rows;
        if (blocks[a].cols != blocks[b].cols) return blocks[a].cols < blocks[b].cols;
        return offset_of(a) < offset_of(b);
    });
    std::vector<GramBatch> out;
    for (std::size_t i : order) {
        const auto& b = blocks[i];
        if (!out.empty()) {
            auto& last = out.back();
            const auto& first = blocks[last.members.front()];
            const std::int64_t step = offset_of(i) - last.offset_of(last.members.size() - 1);
            const bool same_shape = first.rows == b.rows && first.cols == b.cols;
            if (same_shape && step > 0 && (last.members.size() == 1 || step == last.stride)) {
                last.stride = step;
                last.members.push_back(i);
                continue;
            }
        }
        GramBatch g;
        g.members = {i};
        g.trans = b.cols > b.rows;
        g.order = std::min(b.rows, b.cols);
        g.depth = std::max(b.rows, b.cols);
        g.lda = stored_cols;
        g.offset = offset_of(i);
        out.push_back(std::move(g));
    }
    return out;
}

std::optional<std::vector<double>> singular_values_from_gram(std::vector<double> lambda, SvdRoute route) {
    if (lambda.empty()) return lambda;
    const double top = lambda.back();
    if (route == SvdRoute::auto_route && top > 0 && lambda.front() < kGramConditionGuard * top)
        return std::nullopt;
    for (auto& l : lambda) l = std::sqrt(std::max(l, 0.0));
    return lambda;
}

}  // namespace diffract::linalg
