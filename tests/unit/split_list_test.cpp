// The one comma-list splitter (core/split_list.hpp) shared by --roles/--layers and the report's lists.
#include <gtest/gtest.h>

#include "diffract/core/split_list.hpp"

namespace diffract {
namespace {

using V = std::vector<std::string>;

TEST(SplitList, SplitsAtEveryCommaDroppingEmptyItemsWithoutTrimming) {
    EXPECT_EQ(split_list("a,b,c"), (V{"a", "b", "c"}));
    EXPECT_EQ(split_list(",a,,b,"), (V{"a", "b"}));
    EXPECT_EQ(split_list(" a, b"), (V{" a", " b"}));
    EXPECT_EQ(split_list(""), V{});
    EXPECT_EQ(split_list(",,"), V{});
    EXPECT_EQ(split_list("0-3,7"), (V{"0-3", "7"}));
}

}  // namespace
}  // namespace diffract
