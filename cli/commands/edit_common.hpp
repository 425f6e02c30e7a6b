// The options `edit` and `sweep` share (selection, per-head, shard size, device), turned into the
// library's EditCommon in one place.
#pragma once

#include <string>

#include "commands/run_options.hpp"
#include "diffract/edit/edit.hpp"

namespace diffract::cli {

edit::EditCommon to_edit_common(const RunArgs& run, bool per_head, const std::string& max_shard_size);

}  // namespace diffract::cli
