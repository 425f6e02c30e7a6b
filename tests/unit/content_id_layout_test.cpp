// A tensor read through a row order (GGUF RoPE layout) is other content than its bytes in stored
// order: stored results must never be served across the two.
#include <gtest/gtest.h>

#include <vector>

#include "diffract/core/tensor.hpp"
#include "diffract/run/content_identity.hpp"

using namespace diffract;

TEST(ContentId, RowOrderIsPartOfTheIdentity) {
    std::vector<std::byte> bytes(8 * 4, std::byte{1});
    auto file = MappedFile::from_memory("mem", nullptr, bytes.data(), bytes.size());
    TensorInfo stored;
    stored.name = "blk.0.attn_q.weight";
    stored.shape = {8, 1};
    stored.nbytes = bytes.size();
    stored.file = file;
    TensorInfo reordered = stored;
    reordered.rope_head_rows = 4;
    const auto ids = run::content_ids({&stored, &reordered}, nullptr, 1, false);
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_NE(ids.at(&stored), ids.at(&reordered));
    EXPECT_EQ(ids.at(&reordered), ids.at(&stored) + "/rope4");
}
