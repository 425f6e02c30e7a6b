#include "diffract/core/byte_size.hpp"
#include "diffract/edit/edit.hpp"

namespace diffract::edit {

EditCommon parse_edit_common(const EditCommonText& text) {
    EditCommon c;
    c.selection = analysis::make_selection(text);
    c.per_head = text.per_head;
    c.max_shard_bytes = parse_size(text.max_shard_size, "--max-shard-size");
    c.device = linalg::parse_device(text.device);
    c.allow_nonfinite = text.allow_nonfinite;
    return c;
}

}  // namespace diffract::edit
