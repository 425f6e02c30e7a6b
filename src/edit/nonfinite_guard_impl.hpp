// The edit driver's guard against NaN/Inf: inputs are checked before an edited tensor is produced,
// and its output after (edit.hpp, EditCommon::allow_nonfinite).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "diffract/core/tensor.hpp"

namespace diffract::edit {

// The positions where `primary` or one of `inputs` (same shape) holds NaN/Inf: empty when none.
// Unless `allow`, throws InputError naming the first tensor (file and name) that has some.
std::vector<char> nonfinite_mask(const TensorInfo& primary, const std::vector<const TensorInfo*>& inputs,
                                 bool allow);

// Completes an edited tensor `out` (the primary's dtype and shape): the primary's stored bytes go
// back at the masked positions; then every other entry must be finite, else InputError naming the
// primary's file and tensor (an edited value overflowed its dtype).
void finish_output(const TensorInfo& primary, const std::vector<char>& mask, std::span<std::byte> out);

}  // namespace diffract::edit
