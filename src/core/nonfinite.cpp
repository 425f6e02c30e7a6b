#include "diffract/core/nonfinite.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "core/release_behind_impl.hpp"
#include "diffract/core/error.hpp"

namespace diffract {
namespace {

thread_local const TensorScope* current_scope = nullptr;

// Drops a tensor's mapped pages once about kReleaseBehindBytes of it were read, and at the end: a count
// over a whole 100k-row embedding (compare and analyze count before they compute) otherwise left its
// 0.8 GB of pages, and the model's, resident beside the products computed next (one 7B embedding
// unit of compare peaked at 2.10 GiB, 0.67 GiB with this). The whole tensor's range is released, since
// rows of a reordered view (GGUF's Q/K heads) are not stored in order.
class PagesBehind {
public:
    explicit PagesBehind(const TensorInfo& t) : t_(t) {}
    PagesBehind(const PagesBehind&) = delete;
    PagesBehind& operator=(const PagesBehind&) = delete;
    ~PagesBehind() { t_.release_pages(); }
    void read(const MatrixBlock& slab) {
        pending_ += static_cast<std::size_t>(slab.rows) * row_bytes();
        if (pending_ < kReleaseBehindBytes) return;
        t_.release_pages();
        pending_ = 0;
    }

private:
    std::size_t row_bytes() const {
        return t_.nbytes / static_cast<std::size_t>(std::max<std::int64_t>(stored_rows(t_), 1));
    }
    const TensorInfo& t_;
    std::size_t pending_ = 0;
};

// Rows per slab: about 64K values decoded at a time.
std::int64_t slab_rows(std::int64_t cols) {
    return std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(cols, 1));
}

template <typename T>
std::int64_t count_block(const TensorInfo& t, const MatrixBlock& b) {
    check_block_inside(t, b);
    std::int64_t n = 0;
    const std::int64_t step = slab_rows(b.cols);
    PagesBehind behind(t);
    for (std::int64_t r = 0; r < b.rows; r += step) {
        const MatrixBlock slab{b.row0 + r, std::min(step, b.rows - r), b.col0, b.cols, false};
        const auto m = read_matrix<T>(t, slab);
        n += count_nonfinite(std::span<const T>(m.data));
        behind.read(slab);
    }
    return n;
}

template <typename T>
NonfinitePair count_pair(const TensorInfo& a, const TensorInfo& b, const MatrixBlock& blk) {
    check_block_inside(a, blk);
    check_block_inside(b, blk);
    NonfinitePair n;
    const std::int64_t step = slab_rows(blk.cols);
    PagesBehind behind_a(a), behind_b(b);
    for (std::int64_t r = 0; r < blk.rows; r += step) {
        const MatrixBlock slab{blk.row0 + r, std::min(step, blk.rows - r), blk.col0, blk.cols, false};
        const auto x = read_matrix<T>(a, slab), y = read_matrix<T>(b, slab);
        for (std::size_t i = 0; i < x.data.size(); ++i) {
            const bool bad_x = !std::isfinite(x.data[i]), bad_y = !std::isfinite(y.data[i]);
            n.first += bad_x, n.second += bad_y, n.either += bad_x || bad_y;
        }
        behind_a.read(slab), behind_b.read(slab);
    }
    return n;
}

}  // namespace

NonfinitePair count_nonfinite_pair(const TensorInfo& first, const TensorInfo& second,
                                   const MatrixBlock& block, bool f64) {
    return f64 ? count_pair<double>(first, second, block) : count_pair<float>(first, second, block);
}

std::int64_t count_nonfinite(const TensorInfo& t, const MatrixBlock& block, bool f64) {
    return f64 ? count_block<double>(t, block) : count_block<float>(t, block);
}

std::int64_t count_nonfinite(const TensorInfo& t, bool f64) {
    return count_nonfinite(t, {0, stored_rows(t), 0, stored_cols(t), false}, f64);
}

std::string nonfinite_what(std::int64_t count) {
    return fmt::format("{} non-finite {} (NaN/Inf)", count, count == 1 ? "entry" : "entries");
}

std::string nonfinite_warning(std::string_view path, std::string_view tensor, std::int64_t count) {
    return error_context(path, tensor, nonfinite_what(count) + "; its metrics are NaN");
}

TensorScope::TensorScope(std::string path, std::string tensor)
    : path_(std::move(path)), tensor_(std::move(tensor)), outer_(current_scope) {
    current_scope = this;
}

TensorScope::~TensorScope() { current_scope = outer_; }

const TensorScope* TensorScope::current() { return current_scope; }

void throw_numeric_error(std::string_view what) {
    if (!current_scope) throw std::runtime_error(std::string(what));
    throw_input_error(current_scope->path(), current_scope->tensor(), what);
}

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

void require_finite_lower_triangle(std::span<const double> a, std::int64_t n, std::string_view driver,
                                   std::string_view what) {
    std::int64_t bad = 0;
    for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t i = j; i < n; ++i)
            bad += std::isfinite(a[static_cast<std::size_t>(i + j * n)]) ? 0 : 1;
    if (bad > 0)
        throw_numeric_error(fmt::format("{}: {} in a {}x{} {}", driver, nonfinite_what(bad), n, n, what));
}

}  // namespace diffract
