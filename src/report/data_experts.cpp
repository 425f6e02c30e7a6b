// Loading a mixture of experts' compare tables for the expert atlas: experts.csv and expert_overlap.csv.
// They may come from anywhere, so every column the atlas draws is required and checked cell by cell.
#include <cmath>

#include <fmt/format.h>

#include "diffract/core/names.hpp"
#include "diffract/report/csv.hpp"
#include "diffract/report/data.hpp"
#include "diffract/run/tables.hpp"

namespace diffract::report {
namespace column = run::column;
namespace {

// A layer or expert index: a non-negative integer below kMaxGeometryValue (no model has more).
int index_cell(const CsvTable& t, std::size_t r, int c) {
    const auto v = t.integer(r, c);
    if (!v || *v < 0 || *v >= model::kMaxGeometryValue)
        t.fail_cell(r, c,
                    fmt::format("expected an index in 0..{}, found '{}'", model::kMaxGeometryValue - 1,
                                t.cell(r, c)));
    return *v;
}

// A number, or NaN when the cell is empty or nan (an expert without a reference or a router).
double number_cell(const CsvTable& t, std::size_t r, int c) { return c < 0 ? kNaN : t.number(r, c); }

// An overlap: NaN (an undefined subspace) or a number in [0, 1] (up to rounding).
double overlap_cell(const CsvTable& t, std::size_t r, int c) {
    const double v = t.number(r, c);
    if (!std::isnan(v) && !(v >= -1e-9 && v <= 1 + 1e-9))
        t.fail_cell(r, c, fmt::format("expected a number in [0, 1], found '{}'", t.cell(r, c)));
    return v;
}

bool flag_cell(const CsvTable& t, std::size_t r, int c) {
    if (c < 0) return false;
    const auto v = t.integer(r, c);
    if (!v || (*v != 0 && *v != 1))
        t.fail_cell(r, c, fmt::format("expected 0 or 1, found '{}'", t.cell(r, c)));
    return *v == 1;
}

model::ExpertKind kind_cell(const CsvTable& t, std::size_t r, int c) {
    for (const auto k : {model::ExpertKind::routed, model::ExpertKind::shared})
        if (t.cell(r, c) == model::expert_kind_name(k)) return k;
    t.fail_cell(
        r, c,
        fmt::format("expected {} or {}, found '{}'", model::expert_kind_name(model::ExpertKind::routed),
                    model::expert_kind_name(model::ExpertKind::shared), t.cell(r, c)));
}

}  // namespace

void read_experts(const std::string& path, ReportData& data) {
    const auto t = read_csv(path);
    const int model = t.required(column::model), layer = t.required(column::layer),
              expert = t.required(column::expert), kind = t.required(column::expert_kind),
              norm = t.required(column::update_norm);
    const int reference = t.column(column::reference), ref_norm = t.column(column::ref_update_norm),
              importance = t.column(column::importance), router = t.column(column::router_angle_degrees),
              stands_out = t.column("stands_out");
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
        ExpertScore e;
        e.model = t.cell(r, model);
        if (reference >= 0) e.reference = t.cell(r, reference);
        e.layer = index_cell(t, r, layer);
        e.kind = kind_cell(t, r, kind);
        if (e.kind == model::ExpertKind::routed)
            e.expert = index_cell(t, r, expert);
        else if (!t.cell(r, expert).empty())
            t.fail_cell(r, expert,
                        fmt::format("a shared expert has no index, found '{}'", t.cell(r, expert)));
        e.update_norm = t.number(r, norm);
        e.ref_update_norm = number_cell(t, r, ref_norm);
        e.importance = number_cell(t, r, importance);
        e.router_angle = number_cell(t, r, router);
        e.stands_out = flag_cell(t, r, stands_out);
        data.add_model(e.model);
        data.experts.push_back(std::move(e));
    }
}

void read_expert_overlap(const std::string& path, ReportData& data) {
    const auto t = read_csv(path);
    const int model = t.required(column::model), layer = t.required(column::layer),
              a = t.required(column::expert_a), b = t.required(column::expert_b),
              side = t.required(column::side), overlap = t.required(column::overlap),
              overlap_base = t.required(column::overlap_base), above = t.column(column::above_chance);
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
        ExpertPair p;
        p.model = t.cell(r, model);
        p.layer = index_cell(t, r, layer);
        p.expert_a = index_cell(t, r, a);
        p.expert_b = index_cell(t, r, b);
        if (p.expert_a >= p.expert_b)
            t.fail_cell(
                r, b,
                fmt::format("expected an expert after expert_a {}, found '{}'", p.expert_a, t.cell(r, b)));
        const auto s = value_of(analysis::kSubspaceSideNames, t.cell(r, side));
        if (!s)
            t.fail_cell(r, side,
                        fmt::format("expected {}, found '{}'", choice_list(analysis::kSubspaceSideNames),
                                    t.cell(r, side)));
        p.side = *s;
        p.overlap = overlap_cell(t, r, overlap);
        p.overlap_base = overlap_cell(t, r, overlap_base);
        p.above_chance = flag_cell(t, r, above);
        data.add_model(p.model);
        data.expert_pairs.push_back(std::move(p));
    }
}

}  // namespace diffract::report
