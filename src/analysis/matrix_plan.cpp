#include "diffract/analysis/matrix_plan.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract::analysis {

std::string MatrixUnit::block_key() const {
    return head ? fmt::format("{}:{}", model::role_name(role), *head) : std::string();
}

std::string MatrixUnit::store_block() const {
    if (!head && !block.transposed) return "";
    return fmt::format("{}@{}+{},{}+{}{}", block_key(), block.row0, block.rows, block.col0, block.cols,
                       block.transposed ? ",T" : "");
}

double MatrixUnit::flops() const {
    const double m = static_cast<double>(std::max(block.rows, block.cols)),
                 n = static_cast<double>(std::min(block.rows, block.cols));
    return 4.0 * m * n * n + 8.0 * n * n * n;
}

std::uint64_t MatrixUnit::bytes(bool f64) const {
    const auto m = static_cast<std::uint64_t>(block.rows), n = static_cast<std::uint64_t>(block.cols);
    const auto k = std::min(m, n);
    // The matrix, its permuted copy, LAPACK's copy (or the f64 Gram input), and k² workspace.
    return (f64 ? 8 : 4) * 3 * m * n + 8 * (m * n + 3 * k * k);
}

std::vector<MatrixUnit> plan_matrices(const formats::Checkpoint& ck, const Selection& selection, bool heads) {
    std::vector<MatrixUnit> out;
    for (const auto& t : ck.tensors) {
        if (t.shape.size() < 2 || !dtype_is_float(t.dtype) || ck.unsupported_types.count(t.name)) continue;
        const auto r = model::classify_tensor(t.name);
        if (!selection.selects(t.name, r)) continue;
        if (selection.selects_role(r.role))
            out.push_back({&t, model::whole_matrix(ck.schema, t), r.layer, r.role, std::nullopt});
        if (!heads) continue;
        for (const auto& hb : model::head_blocks(ck.schema, t, r.role))
            if (selection.selects_role(hb.proj) || selection.selects_role(r.role))
                out.push_back({&t, hb.block, r.layer, hb.proj, hb.head});
    }
    if (out.empty()) {
        // Nothing analysable: a selected matrix of a type that is not read is an error naming the
        // type, never an empty success.
        for (const auto& t : ck.tensors) {
            if (t.shape.size() < 2 || !selection.selects(t.name, model::classify_tensor(t.name))) continue;
            if (auto u = ck.unsupported_types.find(t.name); u != ck.unsupported_types.end())
                throw_input_error(t.path(), t.name,
                                  fmt::format("ggml type {} is not supported (expected a floating or "
                                              "block-quantised type such as Q4_K, found {}): no selected "
                                              "matrix can be analysed",
                                              u->second, u->second));
            if (!dtype_is_float(t.dtype))
                throw_input_error(t.path(), t.name,
                                  fmt::format("dtype {} is not a floating type (expected a floating matrix, "
                                              "found {}): no selected matrix can be analysed",
                                              dtype_name(t.dtype), dtype_name(t.dtype)));
        }
    }
    return out;
}

std::vector<std::string> unread_matrices(const formats::Checkpoint& ck, const Selection& selection) {
    std::vector<std::string> names;
    std::map<std::string, std::size_t> by_type;
    for (const auto& t : ck.tensors) {
        if (t.shape.size() < 2 || !selection.selects(t.name, model::classify_tensor(t.name))) continue;
        const auto u = ck.unsupported_types.find(t.name);
        if (u == ck.unsupported_types.end() && dtype_is_float(t.dtype)) continue;
        ++by_type[u != ck.unsupported_types.end() ? "ggml type " + u->second
                                                  : "dtype " + std::string(dtype_name(t.dtype))];
        names.push_back(t.name);
    }
    if (names.empty()) return {};
    std::string types;
    for (const auto& [type, n] : by_type)
        types += fmt::format("{}{} ({})", types.empty() ? "" : ", ", type, n);
    return {fmt::format("{}: {} selected matri{} not analysed, of a type that is not decoded: {}; e.g. '{}'",
                        ck.path, names.size(), names.size() == 1 ? "x" : "ces", types, names.front())};
}

}  // namespace diffract::analysis
