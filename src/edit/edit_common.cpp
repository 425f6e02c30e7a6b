#include "diffract/core/byte_size.hpp"
#include "diffract/edit/edit.hpp"

namespace diffract::edit {

EditCommon parse_edit_common(const analysis::SelectionText& selection, const std::string& device,
                             bool per_head, const std::string& max_shard_size) {
    EditCommon c;
    c.selection = analysis::make_selection(selection);
    c.per_head = per_head;
    c.max_shard_bytes = parse_size(max_shard_size, "--max-shard-size");
    c.device = linalg::parse_device(device);
    return c;
}

}  // namespace diffract::edit
