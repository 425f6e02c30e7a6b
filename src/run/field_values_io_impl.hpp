// Field values as bytes, for sending results between MPI ranks: a sequence of
// [u64 index][u32 n_scalars]([u32 len][name][f64])*[u32 n_vectors]([u32 len][name][u64 n][f64 × n])*
// [u32 n_bookkeeping]([u32 len][stored name][f64])* (the bookkeeping's set members, as the store keeps
// them: for_each_stored).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "diffract/core/field_values.hpp"

namespace diffract::run {

std::string serialize_field_values(std::size_t index, const FieldValues& values);
std::vector<std::pair<std::size_t, FieldValues>> parse_field_values(const std::string& bytes);

}  // namespace diffract::run
