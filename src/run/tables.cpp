#include "diffract/run/tables.hpp"

#include <cmath>
#include <map>
#include <optional>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/fit_status.hpp"

namespace diffract::run {
namespace {

Cell count(std::int64_t v) { return v; }
Cell optional_count(const std::optional<int>& v) { return v ? count(*v) : Cell{}; }

double value_or_nan(const std::map<std::string, double>& values, const std::string& field) {
    const auto it = values.find(field);
    return it == values.end() ? std::nan("") : it->second;
}

// A field's value; fit statuses by name.
Cell field_cell(const std::map<std::string, double>& values, const std::string& field) {
    const double v = value_or_nan(values, field);
    if (analysis::is_status_field(field)) return std::string(analysis::fit_status_name(v));
    return v;
}

// metrics.csv's and compare.csv's rows (MetricRow, CompareRow): the identity columns, then one per field.
template <typename Row>
std::vector<Column<Row>> identity() {
    std::vector<Column<Row>> c{{column::model, [](const Row& r) -> Cell { return r.model; }}};
    if constexpr (requires(const Row& r) { r.base; })
        c.push_back({column::base, [](const Row& r) -> Cell { return r.base; }});
    c.push_back({column::tensor, [](const Row& r) -> Cell { return r.tensor; }});
    c.push_back({column::component,
                 [](const Row& r) -> Cell { return std::string(model::component_name(r.component)); }});
    c.push_back({column::layer, [](const Row& r) { return optional_count(r.layer); }});
    c.push_back({column::role, [](const Row& r) -> Cell { return std::string(model::role_name(r.role)); }});
    c.push_back({column::expert, [](const Row& r) { return optional_count(r.expert); }});
    c.push_back({column::expert_kind,
                 [](const Row& r) -> Cell { return std::string(model::expert_kind_name(r.expert_kind)); }});
    c.push_back({column::head, [](const Row& r) { return optional_count(r.head); }});
    c.push_back({column::rows, [](const Row& r) { return count(r.rows); }});
    c.push_back({column::cols, [](const Row& r) { return count(r.cols); }});
    c.push_back({column::nonfinite_count, [](const Row& r) { return count(r.nonfinite_count); }});
    c.push_back({column::precision, [](const Row& r) -> Cell {
                     return std::string(analysis::precision_name(r.precision_bits));
                 }});
    return c;
}

template <typename Row>
Table matrix_table(const std::vector<Row>& rows, const std::vector<std::string>& fields) {
    auto columns = identity<Row>();
    for (const auto& f : fields)
        columns.push_back({f, [f](const Row& r) { return field_cell(r.values, f); }});
    return make_table(columns, rows);
}

template <typename Row>
std::vector<std::string> names(const std::vector<Column<Row>>& columns) {
    std::vector<std::string> out;
    for (const auto& c : columns) out.push_back(c.name);
    return out;
}

// A unit table's (heads.csv, experts.csv) block norms: PREFIX + name + "_update_norm", one per block.
template <typename Row>
std::vector<Column<Row>> block_columns(const std::string& prefix, analysis::HeadStats Row::*stats,
                                       const std::vector<std::string>& blocks) {
    std::vector<Column<Row>> c;
    for (std::size_t b = 0; b < blocks.size(); ++b)
        c.push_back({prefix + blocks[b] + "_update_norm",
                     [stats, b](const Row& r) -> Cell { return (r.*stats).block_norm[b]; }});
    return c;
}

// The ranking's columns, the same in heads.csv and experts.csv: importance and the other keys, the
// ranking's options, the rank, and the noise floor's verdict.
template <typename Row>
std::vector<Column<Row>> ranking_columns(const analysis::HeadRankOptions& ranking) {
    return {
        {column::importance, [](const Row& r) -> Cell { return r.ranked.importance; }},
        {column::agreement, [](const Row& r) -> Cell { return r.domain.agreement; }},
        {column::pl_ks, [](const Row& r) -> Cell { return r.domain.pl_ks; }},
        {column::scale_scope,
         [ranking](const Row&) -> Cell { return std::string(analysis::scale_scope_name(ranking.scope)); }},
        {column::order,
         [ranking](const Row&) -> Cell { return std::string(analysis::head_order_name(ranking.order)); }},
        {column::seed, [ranking](const Row&) -> Cell { return ranking.seed; }},
        {column::rank, [](const Row& r) { return count(r.ranked.rank); }},
        {"relative_update", [](const Row& r) -> Cell { return r.domain.relative_update(); }},
        {"update_z", [](const Row& r) -> Cell { return r.update_z; }},
        {"stands_out", [](const Row& r) { return count(r.stands_out ? 1 : 0); }}};
}

}  // namespace

std::vector<std::string> identity_columns(bool with_base) {
    return with_base ? names(identity<CompareRow>()) : names(identity<MetricRow>());
}

Table metrics_table(const AnalyzeResult& result) { return matrix_table(result.rows, result.fields); }

Table compare_table(const CompareResult& result) {
    return matrix_table(result.rows, analysis::compare_fields());
}

Table aggregates_table(const AnalyzeResult& result) {
    std::vector<Column<ModelAggregates>> columns{
        {column::model, [](const ModelAggregates& a) -> Cell { return a.model; }},
        {column::component,
         [](const ModelAggregates& a) -> Cell { return std::string(model::component_name(a.component)); }}};
    for (const auto& f : analysis::field_catalog())
        if (f.level == analysis::Level::in_model)
            columns.push_back(
                {std::string(f.name), [name = std::string(f.name)](const ModelAggregates& a) -> Cell {
                     return value_or_nan(a.values, name);
                 }});
    return make_table(columns, result.aggregates);
}

Table heads_table(const CompareResult& result) {
    using analysis::HeadRow;
    const std::vector<std::string> qkvo{"q", "k", "v", "o"};
    std::vector<Column<HeadRow>> columns{
        {column::model, [](const HeadRow& h) -> Cell { return h.model; }},
        {column::reference, [](const HeadRow& h) -> Cell { return h.reference; }},
        {column::layer, [](const HeadRow& h) { return count(h.layer); }},
        {column::head, [](const HeadRow& h) { return count(h.head); }},
        {column::kv_head, [](const HeadRow& h) { return count(h.kv_head); }},
        {column::kv_group_size, [](const HeadRow& h) { return count(h.kv_group_size); }},
        {column::update_norm, [](const HeadRow& h) -> Cell { return h.ranked.update_norm; }}};
    for (auto& c : block_columns("", &HeadRow::domain, qkvo)) columns.push_back(std::move(c));
    columns.push_back(
        {column::ref_update_norm, [](const HeadRow& h) -> Cell { return h.ranked.ref_update_norm; }});
    for (auto& c : block_columns("ref_", &HeadRow::ref, qkvo)) columns.push_back(std::move(c));
    for (auto& c : ranking_columns<HeadRow>(result.ranking)) columns.push_back(std::move(c));
    return make_table(columns, result.heads);
}

Table experts_table(const CompareResult& result) {
    using analysis::ExpertRow;
    const std::vector<std::string> blocks(std::begin(analysis::kExpertBlocks),
                                          std::end(analysis::kExpertBlocks));
    std::vector<Column<ExpertRow>> columns{
        {column::model, [](const ExpertRow& e) -> Cell { return e.model; }},
        {column::reference, [](const ExpertRow& e) -> Cell { return e.reference; }},
        {column::layer, [](const ExpertRow& e) { return count(e.layer); }},
        {column::expert, [](const ExpertRow& e) { return optional_count(e.expert); }},
        {column::expert_kind,
         [](const ExpertRow& e) -> Cell { return std::string(model::expert_kind_name(e.kind)); }},
        {column::update_norm, [](const ExpertRow& e) -> Cell { return e.ranked.update_norm; }}};
    for (auto& c : block_columns("", &ExpertRow::domain, blocks)) columns.push_back(std::move(c));
    columns.push_back(
        {column::ref_update_norm, [](const ExpertRow& e) -> Cell { return e.ranked.ref_update_norm; }});
    for (auto& c : ranking_columns<ExpertRow>(result.ranking)) columns.push_back(std::move(c));
    columns.push_back(
        {"router_update_norm", [](const ExpertRow& e) -> Cell { return e.router.update_norm; }});
    columns.push_back(
        {column::router_angle_degrees, [](const ExpertRow& e) -> Cell { return e.router.angle; }});
    return make_table(columns, result.experts);
}

Table expert_overlap_table(const CompareResult& result) {
    using Row = analysis::ExpertOverlapRow;
    return make_table<Row>(
        {{column::model, [](const Row& o) -> Cell { return o.model; }},
         {column::base, [](const Row& o) -> Cell { return o.base; }},
         {column::layer, [](const Row& o) { return count(o.layer); }},
         {column::expert_a, [](const Row& o) { return count(o.expert_a); }},
         {column::expert_b, [](const Row& o) { return count(o.expert_b); }},
         {column::side,
          [](const Row& o) -> Cell { return std::string(name_of(analysis::kSubspaceSideNames, o.side)); }},
         {column::overlap_k, [](const Row& o) { return count(o.floor.k); }},
         {column::hidden, [](const Row& o) { return count(o.floor.n); }},
         {column::overlap_base, [](const Row& o) -> Cell { return o.in_base.overlap; }},
         {column::overlap, [](const Row& o) -> Cell { return o.in_model.overlap; }},
         {column::overlap_change,
          [](const Row& o) -> Cell { return o.in_model.overlap - o.in_base.overlap; }},
         {"max_cos_base", [](const Row& o) -> Cell { return o.in_base.max_cos; }},
         {"max_cos", [](const Row& o) -> Cell { return o.in_model.max_cos; }},
         {"min_angle_degrees_base", [](const Row& o) -> Cell { return o.in_base.min_angle_degrees(); }},
         {"min_angle_degrees", [](const Row& o) -> Cell { return o.in_model.min_angle_degrees(); }},
         {"min_angle_change_degrees",
          [](const Row& o) -> Cell {
              return o.in_model.min_angle_degrees() - o.in_base.min_angle_degrees();
          }},
         {"chance_mean", [](const Row& o) -> Cell { return o.floor.mean; }},
         {column::chance_p99, [](const Row& o) -> Cell { return o.floor.p99; }},
         {"chance_draws", [](const Row& o) { return count(o.floor.draws); }},
         {"above_chance_base", [](const Row& o) { return count(o.base_above_chance() ? 1 : 0); }},
         {column::above_chance, [](const Row& o) { return count(o.model_above_chance() ? 1 : 0); }}},
        result.expert_overlap);
}

Table skipped_table(const CompareResult& result) {
    return make_table<SkippedItem>({{column::model, [](const SkippedItem& s) -> Cell { return s.model; }},
                                    {column::tensor, [](const SkippedItem& s) -> Cell { return s.tensor; }},
                                    {column::block, [](const SkippedItem& s) -> Cell { return s.block; }},
                                    {column::reason, [](const SkippedItem& s) -> Cell { return s.reason; }}},
                                   result.skipped);
}

}  // namespace diffract::run
