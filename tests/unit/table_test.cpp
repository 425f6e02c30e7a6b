#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include <gtest/gtest.h>

#include "diffract/core/table.hpp"
#include "diffract/run/tables.hpp"

namespace diffract {
namespace {

TEST(Table, ToCsvWritesEachCellKindAsTheWritersDo) {
    Table t;
    t.columns = {"model", "layer", "value", "seed"};
    t.rows.push_back({std::string("a,b"), std::int64_t{-3}, 0.1, std::uint64_t{18446744073709551615u}});
    t.rows.push_back({std::string("say \"hi\""), Cell{}, std::nan(""), std::uint64_t{0}});
    t.rows.push_back({std::string(""), std::int64_t{0}, std::numeric_limits<double>::infinity(), Cell{}});
    t.rows.push_back({std::string("two\nlines"), std::int64_t{7}, 1e-300, std::uint64_t{42}});
    EXPECT_EQ(to_csv(t),
              "model,layer,value,seed\n"
              "\"a,b\",-3,0.1,18446744073709551615\n"
              "\"say \"\"hi\"\"\",,nan,0\n"
              ",0,inf,\n"
              "\"two\nlines\",7,1e-300,42\n");
}

TEST(Table, ToCsvQuotesHeaderNamesAndWritesAHeaderWithoutRows) {
    Table t;
    t.columns = {"plain", "with,comma"};
    EXPECT_EQ(to_csv(t), "plain,\"with,comma\"\n");
}

TEST(Table, ToCsvRejectsARowOfTheWrongLength) {
    Table t;
    t.columns = {"a", "b"};
    t.rows.push_back({std::int64_t{1}});
    EXPECT_THROW(to_csv(t), std::logic_error);
}

TEST(Table, HeadsTableNamesItsColumnsAndFillsThemInOrder) {
    run::CompareResult r;
    r.ranking.seed = 7;
    analysis::HeadRow h;
    h.model = "m";
    h.layer = 2, h.head = 3, h.kv_head = 1, h.kv_group_size = 2;
    for (int p = 0; p < analysis::kProjections; ++p) h.domain.block_norm[p] = p + 1;
    h.ranked.update_norm = 5.5, h.ranked.rank = 4;
    for (int p = 0; p < analysis::kProjections; ++p) h.domain.base_block_norm[p] = 4 * (p + 1);  // 25 %
    h.update_z = 4.5, h.stands_out = true;
    r.heads.push_back(h);
    EXPECT_EQ(to_csv(run::heads_table(r)),
              "model,reference,layer,head,kv_head,kv_group_size,update_norm,q_update_norm,k_update_norm,"
              "v_update_norm,o_update_norm,ref_update_norm,ref_q_update_norm,ref_k_update_norm,"
              "ref_v_update_norm,ref_o_update_norm,importance,agreement,pl_ks,scale_scope,order,seed,rank,"
              "relative_update,update_z,stands_out\n"
              "m,,2,3,1,2,5.5,1,2,3,4,nan,nan,nan,nan,nan,nan,nan,nan,global,importance,7,4,0.25,4.5,1\n");
}

TEST(Table, MatrixTablesLeaveMissingLayerAndHeadEmptyAndNameFitStatuses) {
    run::AnalyzeResult r;
    r.fields = {"alpha", "pl_status"};
    run::MetricRow row;
    row.model = "m", row.tensor = "embed", row.role = model::Role::embed, row.rows = 4, row.cols = 3;
    row.values = {{"alpha", 2.5}, {"pl_status", 0}};
    r.rows.push_back(row);
    row.precision_bits = 32;  // --precision f32, served by the f32 route
    r.rows.push_back(row);
    const auto t = run::metrics_table(r);
    EXPECT_EQ(t.columns.size(), run::identity_columns(false).size() + 2);
    EXPECT_EQ(run::identity_columns(true).size(), run::identity_columns(false).size() + 1);
    EXPECT_EQ(to_csv(t),
              "model,tensor,component,layer,role,expert,expert_kind,head,rows,cols,nonfinite_count,precision,"
              "alpha,pl_status\n"
              "m,embed,language,,embed,,,,4,3,0,f64,2.5,ok\n"
              "m,embed,language,,embed,,,,4,3,0,f32,2.5,ok\n");
}

}  // namespace
}  // namespace diffract
