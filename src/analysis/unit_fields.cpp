#include "diffract/analysis/unit_fields.hpp"

#include <span>

#include "diffract/core/error.hpp"
#include "diffract/core/nonfinite.hpp"

namespace diffract::analysis {

template <typename T>
FieldValues compute_unit_fields(const MatrixUnit& unit, std::optional<linalg::Spectrum> singular_values,
                                std::optional<std::int64_t> nonfinite, const std::vector<std::string>& fields,
                                const KernelConfig& kernel, linalg::Backend& backend,
                                std::function<void()> on_draw) {
    const TensorScope scope(unit.tensor->path(), unit.tensor->name);
    std::optional<Matrix<T>> w;
    if (!nonfinite) {
        w = read_matrix<T>(*unit.tensor, unit.block);
        nonfinite = count_nonfinite(std::span<const T>(w->data));
    }
    if (*nonfinite > 0) {
        auto values = nonfinite_field_values(fields, *nonfinite);
        values.bookkeeping.precision_bits = 8 * sizeof(T);
        return values;
    }
    MatrixInput<T> input;
    input.rows = unit.block.logical_rows();
    input.cols = unit.block.logical_cols();
    input.entries = std::move(w);
    input.read = [&unit] { return read_matrix<T>(*unit.tensor, unit.block); };
    input.read_f32 = [&unit] { return read_matrix<float>(*unit.tensor, unit.block); };
    input.singular_values = std::move(singular_values);
    input.on_draw = std::move(on_draw);
    auto values = compute_fields(std::move(input), fields, kernel, backend);
    values.bookkeeping.nonfinite_count = 0;
    return values;
}

template FieldValues compute_unit_fields<float>(const MatrixUnit&, std::optional<linalg::Spectrum>,
                                                std::optional<std::int64_t>, const std::vector<std::string>&,
                                                const KernelConfig&, linalg::Backend&, std::function<void()>);
template FieldValues compute_unit_fields<double>(const MatrixUnit&, std::optional<linalg::Spectrum>,
                                                 std::optional<std::int64_t>, const std::vector<std::string>&,
                                                 const KernelConfig&, linalg::Backend&,
                                                 std::function<void()>);

}  // namespace diffract::analysis
