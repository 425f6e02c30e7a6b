#include "commands/edit_common.hpp"

#include "diffract/core/parallel.hpp"

namespace diffract::cli {

edit::EditCommon to_edit_common(const RunArgs& run, bool per_head, const std::string& max_shard_size) {
    edit::EditCommon c;
    c.selection = analysis::make_selection(run.roles, run.layers, run.match, run.exclude);
    c.per_head = per_head;
    c.max_shard_bytes = parse_size(max_shard_size, "--max-shard-size");
    c.device = run.device;
    return c;
}

}  // namespace diffract::cli
