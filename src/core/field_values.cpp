#include "diffract/core/field_values.hpp"

#include <array>

namespace diffract {
namespace {

std::optional<double> stored(const std::optional<std::int64_t>& count) {
    return count ? std::optional(static_cast<double>(*count)) : std::nullopt;
}

// One member under its stored name, in the names' order (the order a result's rows were stored in
// when the members travelled among its scalars).
struct StoredMember {
    const char* name;
    std::optional<double> (*get)(const Bookkeeping&);
    void (*set)(Bookkeeping&, double);
};

constexpr std::array<StoredMember, 5> kStoredMembers{{
    {kNonfiniteBaseField, [](const Bookkeeping& b) { return stored(b.nonfinite_base); },
     [](Bookkeeping& b, double v) { b.nonfinite_base = static_cast<std::int64_t>(v); }},
    {kNonfiniteCountField, [](const Bookkeeping& b) { return stored(b.nonfinite_count); },
     [](Bookkeeping& b, double v) { b.nonfinite_count = static_cast<std::int64_t>(v); }},
    {kNonfiniteModelField, [](const Bookkeeping& b) { return stored(b.nonfinite_model); },
     [](Bookkeeping& b, double v) { b.nonfinite_model = static_cast<std::int64_t>(v); }},
    {kPrecisionField,
     [](const Bookkeeping& b) {
         return b.precision_bits ? std::optional(static_cast<double>(*b.precision_bits)) : std::nullopt;
     },
     [](Bookkeeping& b, double v) { b.precision_bits = static_cast<int>(v); }},
    {kWholeRouteField,
     [](const Bookkeeping& b) {
         return b.whole_route ? std::optional(*b.whole_route ? 1.0 : 0.0) : std::nullopt;
     },
     [](Bookkeeping& b, double v) { b.whole_route = v != 0; }},
}};

}  // namespace

void for_each_stored(const Bookkeeping& b, const std::function<void(const char* name, double value)>& visit) {
    for (const auto& m : kStoredMembers)
        if (const auto v = m.get(b)) visit(m.name, *v);
}

bool read_stored(Bookkeeping& b, std::string_view name, double value) {
    for (const auto& m : kStoredMembers)
        if (name == m.name) {
            m.set(b, value);
            return true;
        }
    return false;
}

}  // namespace diffract
