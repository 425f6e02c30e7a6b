// Non-finite entries (NaN, ±Inf) of stored tensors: counted before anything factorises a matrix, so
// that LAPACK and cuSOLVER never see them. analyze and compare report a matrix that has some (its
// metrics are NaN, with its count); edits refuse it unless told to carry such entries through.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "diffract/core/matrix.hpp"

namespace diffract {

// NaN and ±Inf entries among `values`.
template <typename T>
std::int64_t count_nonfinite(std::span<const T> values) {
    std::int64_t n = 0;
    for (T v : values) n += std::isfinite(v) ? 0 : 1;
    return n;
}

// Non-finite entries of `block` of `t` as read_matrix<T> reads them (T = double when `f64`, else
// float, where an f64 value beyond f32's range is an infinity). Reads the block in row slabs.
std::int64_t count_nonfinite(const TensorInfo& t, const MatrixBlock& block, bool f64);
// The same over the whole stored tensor (viewed as stored_rows × stored_cols).
std::int64_t count_nonfinite(const TensorInfo& t, bool f64);

// Non-finite entries of the same block of two tensors of one shape: in each, and at the positions
// where either has one.
struct NonfinitePair {
    std::int64_t first = 0, second = 0, either = 0;
};
NonfinitePair count_nonfinite_pair(const TensorInfo& first, const TensorInfo& second,
                                   const MatrixBlock& block, bool f64);

// "N non-finite entries (NaN/Inf)" (one entry: "1 non-finite entry (NaN/Inf)").
std::string nonfinite_what(std::int64_t count);

// The warning analyze and compare give for a matrix with non-finite entries (without the
// "diffract: warning: " prefix): "<file>: tensor '<name>': N non-finite entries (NaN/Inf); its
// metrics are NaN".
std::string nonfinite_warning(std::string_view path, std::string_view tensor, std::int64_t count);

// The warnings of analyze and compare about matrices with non-finite entries: one line per stored
// tensor (its file and name) whatever the number of its blocks, models or bases it appears in.
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

// The file and tensor this thread is computing on, for errors raised below the analyses (a LAPACK
// or cuSOLVER failure): analyses and edits open a scope around their backend calls. Scopes nest.
class TensorScope {
public:
    TensorScope(std::string path, std::string tensor);
    ~TensorScope();
    TensorScope(const TensorScope&) = delete;
    TensorScope& operator=(const TensorScope&) = delete;

    const std::string& path() const { return path_; }
    const std::string& tensor() const { return tensor_; }
    // This thread's innermost scope, or null.
    static const TensorScope* current();

private:
    std::string path_, tensor_;
    const TensorScope* outer_;
};

// A numerical failure of a backend (a non-zero LAPACK/cuSOLVER info, non-finite data reaching a
// factorisation): InputError "<file>: tensor '<name>': <what>" naming the innermost TensorScope of
// this thread; std::runtime_error(what) outside any scope.
[[noreturn]] void throw_numeric_error(std::string_view what);

// Throws throw_numeric_error unless every entry of `values` is finite (`what` names the routine).
template <typename T>
void require_finite(std::span<const T> values, std::string_view what) {
    if (const auto n = count_nonfinite(values); n > 0)
        throw_numeric_error(std::string(what) + ": " + nonfinite_what(n) + " in its input");
}

// The symmetric eigensolvers read the lower triangle of a column-major n × n matrix, which must be
// finite (a Gram matrix of finite entries can still overflow): throw_numeric_error("<driver>: <count>
// in a nxn <what>") otherwise.
void require_finite_lower_triangle(std::span<const double> a, std::int64_t n, std::string_view driver,
                                   std::string_view what);

}  // namespace diffract
