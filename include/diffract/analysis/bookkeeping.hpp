// How a unit's values were computed, beside its fields: the count of NaN/Inf entries, the precision
// that served it and, for compare, each side's count and the route. They travel inside FieldValues
// under their own names (kNonfiniteCountField, kPrecisionField, kNonfiniteBaseField,
// kNonfiniteModelField, kWholeRouteField: the store and the rank exchange carry one FieldValues per
// slot, and stored results keep these names), and are read back as this struct, never by name, before
// rows are made.
#pragma once

#include <cstdint>
#include <optional>

#include "diffract/core/field_values.hpp"

namespace diffract::analysis {

struct Bookkeeping {
    std::int64_t nonfinite_count = 0;                      // absent: 0
    std::optional<int> precision_bits;                     // absent: the caller's default
    std::int64_t nonfinite_base = 0, nonfinite_model = 0;  // compare; absent: 0
    std::optional<bool> whole_route;                       // compare: on the whole-matrix route
};

// The bookkeeping `values` holds.
Bookkeeping bookkeeping_of(const FieldValues& values);
// The same, removed from `values`: what remains are the unit's fields.
Bookkeeping take_bookkeeping(FieldValues& values);

}  // namespace diffract::analysis
