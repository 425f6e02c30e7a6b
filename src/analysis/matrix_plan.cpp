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

namespace {

// Why a selected tensor holds a weight matrix that is not decoded ("" when it is decoded or is no
// weight): a GGUF type diffract does not read, or integer codes of a weight (a quantized layout whose
// scheme was not recognised). Integer buffers that are not weights (BERT's position_ids) are no matrices.
std::string undecoded(const formats::Checkpoint& ck, const TensorInfo& t) {
    if (t.shape.size() < 2) return "";
    if (auto u = ck.unsupported_types.find(t.name); u != ck.unsupported_types.end())
        return "ggml type " + u->second;
    if (dtype_is_float(t.dtype)) return "";
    for (std::string_view suffix : {".weight", ".qweight", "_packed", "_blocks"})
        if (t.name.ends_with(suffix)) return "dtype " + std::string(dtype_name(t.dtype));
    return "";
}

}  // namespace

void check_decoded(const formats::Checkpoint& ck, const Selection& selection) {
    if (!ck.undecoded_quantization.empty())
        throw_input_error(ck.path, "", ck.undecoded_quantization + ": no matrix can be analysed");
    if (selection.allow_partial) return;
    for (const auto& t : ck.tensors)
        if (const auto why = undecoded(ck, t);
            !why.empty() && selection.selects(t.name, model::classify_tensor(t.name)))
            throw_input_error(t.path(), t.name,
                              fmt::format("{} is not decoded (expected a floating, GGUF block or paired "
                                          "quantized weight, found {}; --allow-partial skips such matrices)",
                                          why, why));
}

std::vector<MatrixUnit> plan_matrices(const formats::Checkpoint& ck, const Selection& selection, bool heads) {
    check_decoded(ck, selection);
    std::vector<MatrixUnit> out;
    for (const auto& t : ck.tensors) {
        const auto r = model::classify_tensor(t.name);
        if (!selection.selects(t.name, r) || model::is_quantization_part(t.name)) continue;
        if (t.shape.size() < 2 || !dtype_is_float(t.dtype) || ck.unsupported_types.count(t.name)) continue;
        if (selection.selects_role(r.role))
            out.push_back({&t, model::whole_matrix(ck.schema, t), r.layer, r.role, std::nullopt, r.expert,
                           r.expert_kind, r.component});
        if (!heads) continue;
        for (const auto& hb : model::head_blocks(ck.schema, t, r.role))
            if (selection.selects_role(hb.proj) || selection.selects_role(r.role))
                out.push_back(
                    {&t, hb.block, r.layer, hb.proj, hb.head, r.expert, r.expert_kind, r.component});
    }
    if (out.empty()) {
        // Nothing analysable: a selected matrix of a type that is not read is an error naming the
        // type, never an empty success.
        for (const auto& t : ck.tensors) {
            if (!selection.selects(t.name, model::classify_tensor(t.name))) continue;
            if (const auto why = undecoded(ck, t); !why.empty())
                throw_input_error(t.path(), t.name,
                                  fmt::format("{} is not decoded: no selected matrix can be analysed", why));
        }
    }
    return out;
}

std::vector<std::string> unread_matrices(const formats::Checkpoint& ck, const Selection& selection) {
    std::vector<std::string> names;
    std::map<std::string, std::size_t> by_type;
    for (const auto& t : ck.tensors) {
        if (!selection.selects(t.name, model::classify_tensor(t.name))) continue;
        const auto why = undecoded(ck, t);
        if (why.empty()) continue;
        ++by_type[why];
        names.push_back(t.name);
    }
    if (names.empty()) return {};
    std::string types;
    for (const auto& [type, n] : by_type)
        types += fmt::format("{}{} ({})", types.empty() ? "" : ", ", type, n);
    return {
        fmt::format("{}: {} selected matri{} skipped (--allow-partial), of a type that is not decoded: {}; "
                    "e.g. '{}'",
                    ck.path, names.size(), names.size() == 1 ? "x" : "ces", types, names.front())};
}

}  // namespace diffract::analysis
