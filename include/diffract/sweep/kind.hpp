// The sweeps' categories as types: which sweep (Kind, one row of kKinds each, carrying what differs per
// kind), what a candidate's curve is (Order) and which input a reference point evaluates (RefRole).
// Their text is in the tables below, read by parsing (the journal, the report) and by output (curve.csv,
// summary.json, labels) alike.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "diffract/analysis/head_ranking.hpp"
#include "diffract/core/names.hpp"
#include "diffract/edit/rewind_unit.hpp"

namespace diffract::sweep {

enum class Kind { rewind, rewind_each, validate, truncate, interpolate };

// What differs per kind beyond its parameters (the fingerprint's inputs: kind_inputs in
// sweep_options.cpp, a table of the same kinds).
struct KindInfo {
    Kind kind;
    std::string_view name;        // the subcommand and summary.json's "sweep"
    std::string_view table_file;  // the table it writes (SweepOutputs::table)
    std::string_view axis_label;  // the report's x axis of its curves ("" when it draws none)
    std::string_view grid;        // the default grid of its x (--fractions, --keeps, --omegas; "": none)
};
inline constexpr std::array<KindInfo, 5> kKinds{{
    {Kind::rewind, "rewind", "curve.csv", "fraction of heads rewound", "0:1:0.1"},
    {Kind::rewind_each, "rewind-each", "heads_effect.csv", "", ""},
    {Kind::validate, "validate", "heads_validation.csv", "", ""},
    {Kind::truncate, "truncate", "curve.csv", "fraction of singular values kept", "0:1:0.1"},
    {Kind::interpolate, "interpolate", "curve.csv", "interpolation weight ω", "0:1:0.1"},
}};
inline constexpr NameTable<Kind, 5> kKindNames{{{Kind::rewind, "rewind"},
                                                {Kind::rewind_each, "rewind-each"},
                                                {Kind::validate, "validate"},
                                                {Kind::truncate, "truncate"},
                                                {Kind::interpolate, "interpolate"}}};
static_assert([] {
    for (std::size_t i = 0; i < kKinds.size(); ++i)
        if (static_cast<std::size_t>(kKinds[i].kind) != i || kKinds[i].name != kKindNames[i].name)
            return false;
    return true;
}());
constexpr const KindInfo& kind_info(Kind k) { return kKinds[static_cast<std::size_t>(k)]; }
constexpr std::string_view kind_name(Kind k) { return kind_info(k).name; }

// The table a rewind-each or validate sweep writes for its unit: heads_effect.csv or experts_effect.csv,
// heads_validation.csv or experts_validation.csv (the kind's table_file for heads).
std::string unit_table_file(Kind kind, edit::RewindUnit unit);

// What a candidate's curve is: a head ordering (rewind), the unedited model and single heads
// (rewind-each, validate), validate's head sets, or a grid sweep's own axis (truncate: keep,
// interpolate: omega). curve.csv's "order" column and the journal's "order".
enum class Order {
    importance,
    agreement,
    pl_ks,
    random,
    unedited,
    each,
    bottom,
    top,
    random_bottom,
    random_top,
    keep,
    omega
};
inline constexpr NameTable<Order, 12> kOrderNames{{{Order::importance, "importance"},
                                                   {Order::agreement, "agreement"},
                                                   {Order::pl_ks, "pl_ks"},
                                                   {Order::random, "random"},
                                                   {Order::unedited, "unedited"},
                                                   {Order::each, "each"},
                                                   {Order::bottom, "bottom"},
                                                   {Order::top, "top"},
                                                   {Order::random_bottom, "random_bottom"},
                                                   {Order::random_top, "random_top"},
                                                   {Order::keep, "keep"},
                                                   {Order::omega, "omega"}}};
constexpr std::string_view order_name(Order o) { return name_of(kOrderNames, o); }
// A head ordering's curve (its name is the ordering's).
constexpr Order order_of(analysis::HeadOrder o) {
    return *value_of(kOrderNames, name_of(analysis::kHeadOrderNames, o));
}

// The inputs evaluated as they are beside a sweep: rewind and truncate "base" and "model", interpolate
// "a" and "b". summary.json's "references" keys, DIR/logs/reference-ROLE.log.
enum class RefRole { base, model, a, b };
inline constexpr NameTable<RefRole, 4> kRefRoleNames{
    {{RefRole::base, "base"}, {RefRole::model, "model"}, {RefRole::a, "a"}, {RefRole::b, "b"}}};
constexpr std::string_view role_name(RefRole r) { return name_of(kRefRoleNames, r); }

}  // namespace diffract::sweep
