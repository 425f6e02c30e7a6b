#include <gtest/gtest.h>

#include "diffract/core/csv_field.hpp"

TEST(CsvField, QuotesOnlyWhenNeeded) {
    EXPECT_EQ(diffract::csv_field("model.layers.0.q_proj.weight"), "model.layers.0.q_proj.weight");
    EXPECT_EQ(diffract::csv_field("a,b"), "\"a,b\"");
    EXPECT_EQ(diffract::csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    EXPECT_EQ(diffract::csv_field("two\nlines"), "\"two\nlines\"");
    EXPECT_EQ(diffract::csv_field(""), "");
}
