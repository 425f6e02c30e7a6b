// Loading result directories: metrics.csv, compare.csv, heads.csv (analyze, compare; experts.csv and
// expert_overlap.csv in data_experts.cpp) and
// curve.csv + summary.json (sweep; read defensively: unknown columns ignored, missing ones noted).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diffract/analysis/fit_status.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/report/csv.hpp"
#include "diffract/report/data.hpp"
#include "diffract/run/tables.hpp"
#include "diffract/sweep/kind.hpp"
#include "diffract/sweep/score_direction.hpp"

namespace diffract::report {
namespace fs = std::filesystem;
namespace column = run::column;
namespace {

constexpr char kStep[] = "step";

// The identity columns of metrics.csv and compare.csv; every other column is a field.
const std::set<std::string> kIdentity = [] {
    const auto c = run::identity_columns(true);  // compare.csv's: metrics.csv's and base
    std::set<std::string> s(c.begin(), c.end());
    s.insert(kStep);  // a watch directory's tables: the step of the row's checkpoint
    return s;
}();

// metrics.csv and compare.csv (`compared`): identity columns, then numeric fields. The identity columns
// that place a row in a figure are required: a file without its layer or role column would be drawn
// as if it had no rows of those kinds, with notes that blame the rows.
std::vector<Record> read_records(const std::string& path, bool compared, ReportData& data) {
    const auto t = read_csv(path);
    const int model = t.required(column::model), tensor = t.required(column::tensor);
    const int layer = t.required(column::layer), role = t.required(column::role),
              head = t.required(column::head), base = compared ? t.required(column::base) : -1;
    const int step = t.column(kStep), precision = t.column(column::precision);
    const int component = t.column(column::component), expert_kind = t.column(column::expert_kind);
    std::vector<std::pair<std::string, int>> fields;
    for (std::size_t c = 0; c < t.header.size(); ++c)
        if (!kIdentity.count(t.header[c])) fields.emplace_back(t.header[c], static_cast<int>(c));
    std::vector<Record> out;
    std::map<std::string, std::size_t> towers;  // rows of a component other than the language model
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
        // The figures are the language model's: a tower's layer N is not the language model's layer N.
        if (component >= 0 && t.cell(r, component) != model::component_name(model::Component::language)) {
            ++towers[t.cell(r, component)];
            continue;
        }
        Record rec;
        rec.model = t.cell(r, model);
        rec.tensor = t.cell(r, tensor);
        if (base >= 0) rec.base = t.cell(r, base);
        rec.role = t.cell(r, role);
        // A shared expert's matrices are a series of their own, never pooled with the routed experts'.
        if (expert_kind >= 0 && t.cell(r, expert_kind) == model::expert_kind_name(model::ExpertKind::shared))
            rec.role += " (shared expert)";
        rec.layer = t.integer(r, layer);
        rec.head = t.integer(r, head);
        if (step >= 0) rec.step = t.int64(r, step);
        if (precision >= 0) rec.precision = value_of(analysis::kPrecisionNames, t.cell(r, precision));
        for (const auto& [name, c] : fields) {
            if (!analysis::is_status_field(name)) {
                rec.values[name] = t.number(r, c);
                continue;
            }
            // Fit statuses are written by name (fit_status.hpp); the report keeps their codes.
            const auto code = analysis::fit_status_code(t.cell(r, c));
            if (!code)
                throw InputError(fmt::format("{}:{}: column '{}': expected a fit status, found '{}'",
                                             t.source, t.lines[r], name, t.cell(r, c)));
            rec.values[name] = *code;
        }
        data.add_model(rec.model);
        out.push_back(std::move(rec));
    }
    for (const auto& [name, n] : towers)
        data.notes.push_back(
            fmt::format("{}: {} rows of the {} component are not drawn (the figures are the "
                        "language model's; the rows are in the file)",
                        path, n, name));
    return out;
}

void read_heads(const std::string& path, ReportData& data) {
    const auto t = read_csv(path);
    const int model = t.required(column::model), layer = t.required(column::layer),
              head = t.required(column::head);
    const int reference = t.column(column::reference), norm = t.required(column::update_norm);
    const int ref_norm = t.column(column::ref_update_norm), importance = t.column(column::importance),
              agreement = t.column(column::agreement), step = t.column(kStep);
    const auto num = [&](std::size_t r, int c) { return c < 0 ? kNaN : t.number(r, c); };
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
        HeadScore h;
        h.model = t.cell(r, model);
        if (reference >= 0) h.reference = t.cell(r, reference);
        const auto l = t.integer(r, layer), hd = t.integer(r, head);
        if (!l || !hd) throw InputError(fmt::format("{}:{}: empty layer or head", path, t.lines[r]));
        h.layer = *l;
        h.head = *hd;
        h.update_norm = num(r, norm);
        h.ref_update_norm = num(r, ref_norm);
        h.importance = num(r, importance);
        h.agreement = num(r, agreement);
        if (step >= 0) h.step = t.int64(r, step);
        data.add_model(h.model);
        data.heads.push_back(std::move(h));
    }
}

// A watch's alerts.csv: the steps where a rule of thumb fired.
void read_alerts(const std::string& path, ReportData& data) {
    const auto t = read_csv(path);
    const int step = t.required(kStep), kind = t.required("kind"), tensor = t.required(column::tensor),
              layer = t.required(column::layer), role = t.required(column::role), field = t.required("field"),
              message = t.required("message");
    for (std::size_t r = 0; r < t.rows.size(); ++r)
        data.alerts.push_back({t.int64(r, step).value_or(0), t.cell(r, kind), t.cell(r, tensor),
                               t.cell(r, role), t.cell(r, field), t.cell(r, message), t.integer(r, layer)});
}

nlohmann::json read_summary(const fs::path& path, ReportData& data) {
    if (!fs::exists(path)) return nlohmann::json::object();
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto j = parse_json_bounded(text, path.string());
    if (j.is_discarded() || !j.is_object()) {
        data.notes.push_back(fmt::format("{}: not a JSON object; ignored", path.string()));
        return nlohmann::json::object();
    }
    return j;
}

// The sweep's kind: summary.json's "kind"/"sweep"/"mode"/"command", else the directory's name;
// nullopt: a sweep of another kind (drawn as a generic one).
std::optional<sweep::Kind> sweep_kind(const nlohmann::json& summary, const std::string& dir_name) {
    std::string s;
    for (const char* key : {"kind", "sweep", "mode", "command"})
        if (summary.contains(key) && summary[key].is_string()) {
            s = summary[key].get<std::string>();
            break;
        }
    if (s.empty()) s = dir_name;
    if (s.find("rewind-each") != std::string::npos || s.find("rewind_each") != std::string::npos)
        return sweep::Kind::rewind_each;
    if (s.find("rewind") != std::string::npos) return sweep::Kind::rewind;
    if (s.find("trunc") != std::string::npos) return sweep::Kind::truncate;
    if (s.find("interp") != std::string::npos) return sweep::Kind::interpolate;
    return std::nullopt;
}

std::optional<double> sweep_baseline(const nlohmann::json& summary) {
    for (const char* key : {"baseline", "base_score", "full_score", "score_full", "unedited_score"})
        if (summary.contains(key) && summary[key].is_number()) return summary[key].get<double>();
    return std::nullopt;
}

// summary.json's "references": {"KEY": {"score": S, "eval_seconds": T, ...} or a bare number}. A
// reference without a finite score is noted, not drawn.
std::vector<SweepReference> sweep_references(const nlohmann::json& summary, const std::string& source,
                                             ReportData& data) {
    std::vector<SweepReference> out;
    if (!summary.contains("references")) return out;
    const auto& refs = summary["references"];
    if (!refs.is_object()) {
        data.notes.push_back(fmt::format("{}: \"references\" is not an object; ignored", source));
        return out;
    }
    for (const auto& [key, v] : refs.items()) {
        SweepReference r;
        r.key = key;
        if (v.is_number()) r.scores["score"] = v.get<double>();
        if (v.is_object())
            for (const auto& [field, x] : v.items()) {
                if (!x.is_number()) continue;
                if (field == "eval_seconds")
                    r.eval_seconds = x.get<double>();
                else if (field.rfind("score", 0) == 0 && std::isfinite(x.get<double>()))
                    r.scores[field] = x.get<double>();
            }
        if (r.scores.empty()) {
            data.notes.push_back(
                fmt::format("{}: reference '{}' has no numeric score; not drawn", source, key));
            continue;
        }
        out.push_back(std::move(r));
    }
    return out;
}

// The score's name and direction from summary.json (score_key, direction), else guessed from the name.
ScoreAxis score_axis(const nlohmann::json& summary) {
    ScoreAxis a;
    if (summary.contains("score_key") && summary["score_key"].is_string() &&
        !summary["score_key"].get<std::string>().empty())
        a.key = summary["score_key"].get<std::string>();
    // The sweep's own direction where it wrote one (null: it knew none); else, for a summary written
    // before the direction was, the sweeps' rule on the key.
    if (summary.contains("direction") && summary["direction"].is_string())
        a.lower_is_better = value_of(sweep::kDirectionNames, summary["direction"].get<std::string>()) == true;
    else if (!summary.contains("direction") && summary.contains("score_key"))
        a.lower_is_better = sweep::key_lower_is_better(a.key);
    return a;
}

// The display name of a result directory: its own name (the parent's for "DIR/.").
std::string dir_name(const fs::path& dir) {
    auto name = fs::absolute(dir).lexically_normal().filename().string();
    return name.empty() ? fs::absolute(dir).lexically_normal().parent_path().filename().string() : name;
}

// heads_effect.csv (rewind-each: delta per head) or heads_validation.csv (validate: harm, importance;
// sets from summary.json), with the verdict and the Spearman rho of a validation.
void read_head_effects(const fs::path& dir, sweep::Kind kind, edit::RewindUnit unit, ReportData& data) {
    const auto csv = (dir / sweep::unit_table_file(kind, unit)).string();
    const auto t = read_csv(csv);
    const auto summary = read_summary(dir / "summary.json", data);
    HeadEffects e;
    e.source = csv;
    e.name = dir_name(dir);
    e.kind = kind;
    e.unit = unit;
    e.axis = score_axis(summary);
    const auto index_column = std::string(edit::rewind_unit_words(unit).singular);
    const int layer = t.column("layer"), head = t.column(index_column), delta = t.column("delta"),
              harm = t.column("harm"), importance = t.column("importance");
    if (layer < 0 || head < 0 || (delta < 0 && harm < 0)) {
        data.notes.push_back(
            fmt::format("{}: no layer, {} and delta (or harm) columns; not drawn", csv, index_column));
        return;
    }
    // A validation's harm is the score lost in the score's direction: the change is its negation
    // (higher is better) or itself (lower is better).
    const double sign = e.axis.lower_is_better.value_or(false) ? 1.0 : -1.0;
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
        HeadEffect h;
        h.layer = static_cast<int>(t.number(r, layer));
        h.head = static_cast<int>(t.number(r, head));
        h.change = delta >= 0 ? t.number(r, delta) : sign * t.number(r, harm);
        if (importance >= 0) h.importance = t.number(r, importance);
        e.heads.push_back(h);
    }
    if (summary.contains("sets") && summary["sets"].is_array())
        for (const auto& j : summary["sets"])
            if (j.is_object() && j.contains("set") && j["set"].is_string() && j.contains("harm") &&
                j["harm"].is_number())
                e.sets.push_back({j["set"].get<std::string>(), sign * j["harm"].get<double>()});
    if (summary.contains("verdict") && summary["verdict"].is_array())
        for (const auto& v : summary["verdict"])
            if (v.is_string()) e.verdict.push_back(v.get<std::string>());
    if (summary.contains("predictive") && summary["predictive"].is_object()) {
        const auto& p = summary["predictive"];
        if (p.contains("spearman") && p["spearman"].is_number()) e.spearman = p["spearman"].get<double>();
        if (p.contains("ci95") && p["ci95"].is_array() && p["ci95"].size() == 2 && p["ci95"][0].is_number() &&
            p["ci95"][1].is_number())
            e.ci_low = p["ci95"][0].get<double>(), e.ci_high = p["ci95"][1].get<double>();
    }
    data.head_effects.push_back(std::move(e));
}

void read_sweep(const fs::path& dir, ReportData& data) {
    const auto csv = (dir / "curve.csv").string();
    const auto t = read_csv(csv);
    const auto summary = read_summary(dir / "summary.json", data);
    const int x = t.column("x"), order = t.column("order"), seed = t.column("seed"),
              seconds = t.column("eval_seconds");
    Sweep s;
    s.source = csv;
    s.name = dir_name(dir);
    s.kind = sweep_kind(summary, s.name);
    if (summary.contains("unit") && summary["unit"].is_string())
        s.unit = value_of(edit::kRewindUnitNames, summary["unit"].get<std::string>()).value_or(s.unit);
    s.axis = score_axis(summary);
    s.baseline = sweep_baseline(summary);
    s.references = sweep_references(summary, (dir / "summary.json").string(), data);
    std::vector<int> score_cols;
    for (std::size_t c = 0; c < t.header.size(); ++c)
        if (t.header[c].rfind("score", 0) == 0) {
            s.score_columns.push_back(t.header[c]);
            score_cols.push_back(static_cast<int>(c));
        }
    if (x < 0 || score_cols.empty()) {
        data.notes.push_back(fmt::format("{}: no 'x' or 'score' column; sweep skipped", csv));
        return;
    }
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
        SweepPoint p;
        p.order = order >= 0 ? t.cell(r, order) : "";
        p.seed = seed >= 0 ? static_cast<long long>(t.number(r, seed)) : 0;
        p.x = t.number(r, x);
        for (int c : score_cols) p.scores.push_back(t.number(r, c));
        if (seconds >= 0) p.eval_seconds = t.number(r, seconds);
        s.points.push_back(std::move(p));
    }
    data.sweeps.push_back(std::move(s));
}

}  // namespace

std::string ScoreAxis::label() const {
    if (!lower_is_better) return key;
    return fmt::format("{} ({} is better)", key, sweep::direction_name(*lower_is_better));
}

double Record::value(const std::string& field) const {
    const auto it = values.find(field);
    return it == values.end() ? kNaN : it->second;
}

void ReportData::add_model(const std::string& name) {
    if (!name.empty() && std::find(models.begin(), models.end(), name) == models.end())
        models.push_back(name);
}

std::string ReportData::precision_summary() const {
    std::size_t rows = 0, f32 = 0, f64 = 0;
    for (const auto* records : {&metrics, &compare})
        for (const auto& r : *records) {
            ++rows;
            f32 += r.precision == analysis::Precision::f32;
            f64 += r.precision == analysis::Precision::f64;
        }
    if (f32 + f64 == 0) return "";
    const auto unknown = rows - f32 - f64;
    const auto rest = unknown ? fmt::format("; {} without a precision column", unknown) : std::string();
    if (f32 == 0) return fmt::format("f64 (all {} rows{})", f64, rest);
    if (f64 == 0) return fmt::format("f32 (all {} rows{})", f32, rest);
    return fmt::format(
        "f32 for {} rows, f64 for {} (the matrices the f32 routes cannot serve within their "
        "contract, and compare's Gram routes){}",
        f32, f64, rest);
}

void load_result_dir(const std::string& dir, ReportData& data) {
    const fs::path d(dir);
    if (!fs::is_directory(d))
        throw InputError(fmt::format("{}: not a directory (expected a result directory or a store)", dir));
    bool any = false;
    if (fs::exists(d / "metrics.csv")) {
        auto rows = read_records((d / "metrics.csv").string(), false, data);
        data.metrics.insert(data.metrics.end(), rows.begin(), rows.end());
        any = true;
    }
    if (fs::exists(d / "compare.csv")) {
        auto rows = read_records((d / "compare.csv").string(), true, data);
        data.compare.insert(data.compare.end(), rows.begin(), rows.end());
        any = true;
    }
    if (fs::exists(d / "heads.csv")) {
        read_heads((d / "heads.csv").string(), data);
        any = true;
    }
    if (fs::exists(d / "experts.csv")) {  // a mixture of experts' compare
        read_experts((d / "experts.csv").string(), data);
        any = true;
    }
    if (fs::exists(d / "expert_overlap.csv")) {
        read_expert_overlap((d / "expert_overlap.csv").string(), data);
        any = true;
    }
    if (fs::exists(d / "curve.csv")) {
        read_sweep(d, data);
        any = true;
    }
    for (const auto kind : {sweep::Kind::rewind_each, sweep::Kind::validate})
        for (const auto unit : {edit::RewindUnit::heads, edit::RewindUnit::experts})
            if (fs::exists(d / sweep::unit_table_file(kind, unit))) {
                read_head_effects(d, kind, unit, data);
                any = true;
            }
    if (any && fs::exists(d / "alerts.csv")) read_alerts((d / "alerts.csv").string(), data);
    if (!any)
        throw InputError(fmt::format(
            "{}: no metrics.csv, compare.csv, heads.csv, experts.csv, expert_overlap.csv, curve.csv, "
            "heads_effect.csv, heads_validation.csv, experts_effect.csv or experts_validation.csv in this "
            "directory",
            dir));
}

}  // namespace diffract::report
