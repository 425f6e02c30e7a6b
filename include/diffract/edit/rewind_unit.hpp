// What a rewind gives the base's values, heads or experts: a header of its own (with no checkpoint
// types) so that the report, which reads the sweeps' outputs, names units as the edits do.
#pragma once

#include <string>
#include <string_view>

#include "diffract/core/names.hpp"

namespace diffract::edit {

// What a rewind gives the base's values: attention heads (their Q/K/V/O blocks) or the experts of a
// mixture of experts (every matrix and bias of theirs).
enum class RewindUnit { heads, experts };
inline constexpr NameTable<RewindUnit, 2> kRewindUnitNames{
    {{RewindUnit::heads, "heads"}, {RewindUnit::experts, "experts"}}};
RewindUnit parse_rewind_unit(const std::string& text);
// How a unit is written in tables, labels and sentences: "heads"/"experts", the table column of its
// index ("head"/"expert"), with its article ("a head"/"an expert"), the letter of its labels (L3_H5,
// L3_E5).
struct RewindUnitWords {
    std::string_view plural, singular, one, letter;
};
constexpr RewindUnitWords rewind_unit_words(RewindUnit unit) {
    return unit == RewindUnit::experts ? RewindUnitWords{"experts", "expert", "an expert", "E"}
                                       : RewindUnitWords{"heads", "head", "a head", "H"};
}
// --unit as the front ends take it: `unit`, or when it is empty experts if --experts (`experts`) names
// some (a head rewind of expert matrices would select nothing), else heads.
RewindUnit rewind_unit_of(const std::string& unit, const std::string& experts);

}  // namespace diffract::edit
