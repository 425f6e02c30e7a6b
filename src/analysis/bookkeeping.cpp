#include "diffract/analysis/bookkeeping.hpp"

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/compare.hpp"

namespace diffract::analysis {
namespace {

const char* const kBookkeepingFields[] = {kNonfiniteCountField, kPrecisionField, kNonfiniteBaseField,
                                          kNonfiniteModelField, kWholeRouteField};

std::optional<double> scalar(const FieldValues& values, const char* field) {
    const auto it = values.scalars.find(field);
    return it == values.scalars.end() ? std::nullopt : std::optional(it->second);
}

}  // namespace

Bookkeeping bookkeeping_of(const FieldValues& values) {
    Bookkeeping b;
    const auto count = [&](const char* field) {
        return static_cast<std::int64_t>(scalar(values, field).value_or(0.0));
    };
    b.nonfinite_count = count(kNonfiniteCountField);
    b.nonfinite_base = count(kNonfiniteBaseField);
    b.nonfinite_model = count(kNonfiniteModelField);
    if (const auto bits = scalar(values, kPrecisionField)) b.precision_bits = static_cast<int>(*bits);
    if (const auto whole = scalar(values, kWholeRouteField)) b.whole_route = *whole != 0;
    return b;
}

Bookkeeping take_bookkeeping(FieldValues& values) {
    const auto b = bookkeeping_of(values);
    for (const char* field : kBookkeepingFields) values.scalars.erase(field);
    return b;
}

}  // namespace diffract::analysis
