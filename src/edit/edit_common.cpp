#include "diffract/core/parallel.hpp"
#include "diffract/edit/edit.hpp"

namespace diffract::edit {

EditCommon parse_edit_common(const analysis::RunOptionText& run, bool per_head,
                             const std::string& max_shard_size) {
    EditCommon c;
    c.selection = analysis::make_selection(run.roles, run.layers, run.match, run.exclude);
    c.per_head = per_head;
    c.max_shard_bytes = parse_size(max_shard_size, "--max-shard-size");
    linalg::check_device(run.device);
    c.device = run.device;
    return c;
}

}  // namespace diffract::edit
