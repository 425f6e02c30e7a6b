// The values one computation produced for one matrix, head block or pair: named scalars and named
// vectors, and beside them how they were computed (Bookkeeping). The plain result an analysis returns,
// the store keeps and the run layer gathers across ranks, so it lives at the bottom: no layer needs
// another to pass it on.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace diffract {

// How a unit's values were computed: not fields of the catalog, typed here, and set only by the
// computation that knows them (absent: not computed there). The store keeps each set member as a row
// under its stored name below, and the rank exchange sends it beside the fields, so that a reused or
// gathered result carries the same bookkeeping as a computed one.
struct Bookkeeping {
    // NaN/Inf entries of the unit (compare: positions where either block has one); a clean unit: 0.
    std::optional<std::int64_t> nonfinite_count;
    // The precision of the arithmetic the fields were computed in, in bits (32 or 64): the entries'
    // unless a factorisation fell back to f64. Written as the tables' `precision` column.
    std::optional<int> precision_bits;
    // compare: each side's count of NaN/Inf entries in the unit (the warnings name the files).
    std::optional<std::int64_t> nonfinite_base, nonfinite_model;
    // compare: computed on the whole-matrix route (gesdd, or the Gram route's fallback).
    std::optional<bool> whole_route;
};

// The stored names of Bookkeeping's members (the store's rows; a stored result needs the count, and
// under --precision f32 the precision, to be reused). Never CSV columns under these names.
inline constexpr const char* kNonfiniteCountField = "nonfinite_count";
inline constexpr const char* kPrecisionField = "precision_bits";
inline constexpr const char* kNonfiniteBaseField = "nonfinite_base";
inline constexpr const char* kNonfiniteModelField = "nonfinite_model";
inline constexpr const char* kWholeRouteField = "whole_route";

struct FieldValues {
    std::map<std::string, double> scalars;
    std::map<std::string, std::vector<double>> vectors;
    Bookkeeping bookkeeping;
};

// Each set member of `b` as (stored name, value): counts and bits as numbers, the route as 1 or 0.
void for_each_stored(const Bookkeeping& b, const std::function<void(const char* name, double value)>& visit);
// Sets the member stored as `name` from its stored `value`; false when `name` is no member's (a field).
bool read_stored(Bookkeeping& b, std::string_view name, double value);

}  // namespace diffract
