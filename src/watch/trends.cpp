#include "diffract/watch/trends.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "diffract/core/numbers.hpp"

namespace diffract::watch {
namespace {

// A unit's identity across steps.
using UnitKey = std::tuple<Source, std::string, std::optional<int>, std::optional<int>>;
UnitKey key_of(const Observation& o) { return {o.source, o.tensor, o.layer, o.head}; }

// Each unit's observations in step order.
std::map<UnitKey, std::vector<const Observation*>> by_unit(const std::vector<Observation>& observations) {
    std::map<UnitKey, std::vector<const Observation*>> units;
    for (const auto& o : observations) units[key_of(o)].push_back(&o);
    for (auto& [key, list] : units)
        std::stable_sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->step < b->step; });
    return units;
}

double value_of(const Observation& o, const std::string& field) {
    const auto it = o.values.find(field);
    return it == o.values.end() ? kNaN : it->second;
}

std::vector<double> thresholds_of(const std::string& field, const AlertThresholds& t) {
    // The range rules on a field: pl_alpha's WeightWatcher band.
    if (field == alert_rule(AlertKind::over_fit).field) return {t.alpha_low, t.alpha_high};
    return {};
}

// Least-squares slope of (x, y); NaN with fewer than two distinct x.
double slope(const std::vector<std::pair<double, double>>& points) {
    if (points.size() < 2) return kNaN;
    double mx = 0, my = 0;
    for (const auto& [x, y] : points) mx += x, my += y;
    mx /= static_cast<double>(points.size());
    my /= static_cast<double>(points.size());
    double sxy = 0, sxx = 0;
    for (const auto& [x, y] : points) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
    return sxx > 0 ? sxy / sxx : kNaN;
}

Alert alert_at(const Observation& o, AlertKind kind, double value, double previous, double threshold,
               std::string message) {
    Alert a;
    a.step = o.step;
    a.kind = kind;
    a.tensor = o.tensor, a.role = o.role, a.layer = o.layer, a.head = o.head;
    a.field = std::string(alert_rule(kind).field);
    a.value = value, a.previous = previous, a.threshold = threshold;
    a.message = std::move(message);
    return a;
}

// `value` with as few significant digits (3 at least) as tell it apart from `threshold` as printed,
// so that an alert never reads "2 < 2" for 1.99996.
std::string beside(double value, double threshold) {
    const std::string limit = fmt::format("{:g}", threshold);
    for (int digits = 3; digits < 17; ++digits) {
        std::string text = fmt::format("{:.{}g}", value, digits);
        if (text != limit) return text;
    }
    return fmt::format("{:.17g}", value);
}

// Whole matrices: WeightWatcher's alpha range, and jumps of alpha and stable rank.
void matrix_alerts(const std::vector<const Observation*>& steps, const AlertThresholds& t,
                   std::vector<Alert>& out) {
    bool was_low = false, was_high = false;
    const Observation* previous = nullptr;
    for (const auto* o : steps) {
        const double alpha = value_of(*o, "pl_alpha");
        const bool low = alpha<t.alpha_low, high = alpha> t.alpha_high;  // false for NaN
        if (low && !was_low)
            out.push_back(alert_at(*o, AlertKind::over_fit, alpha, kNaN, t.alpha_low,
                                   fmt::format("{} pl_alpha {} < {:g}: over-fit by WeightWatcher's rule",
                                               o->tensor, beside(alpha, t.alpha_low), t.alpha_low)));
        if (high && !was_high)
            out.push_back(alert_at(*o, AlertKind::under_trained, alpha, kNaN, t.alpha_high,
                                   fmt::format("{} pl_alpha {} > {:g}: under-trained by WeightWatcher's rule",
                                               o->tensor, beside(alpha, t.alpha_high), t.alpha_high)));
        if (!std::isnan(alpha)) was_low = low, was_high = high;
        if (previous) {
            const double a0 = value_of(*previous, "pl_alpha");
            if (std::abs(alpha - a0) > t.alpha_jump)
                out.push_back(
                    alert_at(*o, AlertKind::alpha_jump, alpha, a0, t.alpha_jump,
                             fmt::format("{} pl_alpha moved {:.3g} -> {:.3g} since step {} (more than {:g})",
                                         o->tensor, a0, alpha, previous->step, t.alpha_jump)));
            const double s0 = value_of(*previous, "stable_rank"), s = value_of(*o, "stable_rank");
            if (s0 > 0 && std::abs(s - s0) / s0 > t.stable_rank_jump)
                out.push_back(alert_at(
                    *o, AlertKind::stable_rank_jump, s, s0, t.stable_rank_jump,
                    fmt::format("{} stable_rank moved {:.4g} -> {:.4g} since step {} (more than {:g} of it)",
                                o->tensor, s0, s, previous->step, t.stable_rank_jump)));
        }
        previous = o;
    }
}

// Per step, over every head of heads.csv: the largest tenth's share of the squared update norm.
void concentration_alerts(const std::vector<Observation>& observations, const AlertThresholds& t,
                          std::vector<Alert>& out) {
    std::map<std::int64_t, std::vector<const Observation*>> steps;
    for (const auto& o : observations)
        if (o.source == Source::heads) steps[o.step].push_back(&o);
    bool was_concentrated = false;
    for (const auto& [step, heads] : steps) {
        std::vector<double> sq;
        for (const auto* h : heads) {
            const double u = value_of(*h, "update_norm");
            if (std::isfinite(u)) sq.push_back(u * u);
        }
        double total = 0;
        for (double v : sq) total += v;
        if (sq.empty() || !(total > 0)) continue;
        std::sort(sq.rbegin(), sq.rend());
        const std::size_t top = std::max<std::size_t>(1, (sq.size() + 9) / 10);
        double held = 0;
        for (std::size_t i = 0; i < top; ++i) held += sq[i];
        const double share = held / total;
        const bool concentrated = share > t.head_share;
        if (concentrated && !was_concentrated) {
            Observation where;
            where.step = step;
            out.push_back(
                alert_at(where, AlertKind::head_concentration, share, kNaN, t.head_share,
                         fmt::format("the largest {} of {} head updates hold {:.0f} % of their squared "
                                     "norm (more than {:g} %)",
                                     top, sq.size(), 100 * share, 100 * t.head_share)));
        }
        was_concentrated = concentrated;
    }
}

Cell optional_count(const std::optional<int>& v) { return v ? Cell{std::int64_t{*v}} : Cell{}; }
Cell optional_number(const std::optional<double>& v) { return v ? Cell{*v} : Cell{}; }
Cell role_cell(const std::optional<model::Role>& r) { return std::string(r ? model::role_name(*r) : ""); }

}  // namespace

std::vector<Trend> trends(const std::vector<Observation>& observations, const AlertThresholds& thresholds) {
    std::vector<Trend> out;
    for (const auto& [key, steps] : by_unit(observations)) {
        std::vector<std::string> fields;
        for (const auto* o : steps)
            for (const auto& [f, v] : o->values)
                if (std::find(fields.begin(), fields.end(), f) == fields.end()) fields.push_back(f);
        for (const auto& field : fields) {
            std::vector<std::pair<double, double>> points;
            std::vector<std::int64_t> at;
            for (const auto* o : steps) {
                const double v = value_of(*o, field);
                if (std::isfinite(v))
                    points.emplace_back(static_cast<double>(o->step), v), at.push_back(o->step);
            }
            if (points.empty()) continue;
            Trend t;
            const auto& first = *steps.front();
            t.source = first.source, t.tensor = first.tensor, t.role = first.role, t.field = field;
            t.layer = first.layer, t.head = first.head;
            t.checkpoints = points.size();
            t.first_step = at.front(), t.last_step = at.back();
            t.first = points.front().second, t.last = points.back().second;
            t.change = t.last - t.first;
            t.min = t.max = t.first;
            for (const auto& [x, y] : points) t.min = std::min(t.min, y), t.max = std::max(t.max, y);
            t.slope = slope(points);
            for (double thr : thresholds_of(field, thresholds)) {
                for (std::size_t i = 1; i < points.size(); ++i)
                    if ((points[i].second < thr) != (t.first < thr)) {
                        if (!t.crossed_step || at[i] < *t.crossed_step)
                            t.crossed_step = at[i], t.threshold = thr;
                        break;
                    }
            }
            out.push_back(std::move(t));
        }
    }
    return out;
}

std::vector<Alert> alerts(const std::vector<Observation>& observations, const AlertThresholds& thresholds) {
    std::vector<Alert> out;
    for (const auto& [key, steps] : by_unit(observations))
        if (std::get<0>(key) == Source::metrics && !std::get<3>(key)) matrix_alerts(steps, thresholds, out);
    concentration_alerts(observations, thresholds, out);
    std::stable_sort(out.begin(), out.end(), [](const Alert& a, const Alert& b) { return a.step < b.step; });
    return out;
}

Table trends_table(const std::vector<Trend>& trends) {
    return make_table<Trend>(
        {{"source", [](const Trend& t) -> Cell { return std::string(name_of(kSourceNames, t.source)); }},
         {"tensor", [](const Trend& t) -> Cell { return t.tensor; }},
         {"layer", [](const Trend& t) { return optional_count(t.layer); }},
         {"role", [](const Trend& t) { return role_cell(t.role); }},
         {"head", [](const Trend& t) { return optional_count(t.head); }},
         {"field", [](const Trend& t) -> Cell { return t.field; }},
         {"checkpoints", [](const Trend& t) -> Cell { return static_cast<std::uint64_t>(t.checkpoints); }},
         {"first_step", [](const Trend& t) -> Cell { return t.first_step; }},
         {"first", [](const Trend& t) -> Cell { return t.first; }},
         {"last_step", [](const Trend& t) -> Cell { return t.last_step; }},
         {"last", [](const Trend& t) -> Cell { return t.last; }},
         {"change", [](const Trend& t) -> Cell { return t.change; }},
         {"slope", [](const Trend& t) -> Cell { return t.slope; }},
         {"min", [](const Trend& t) -> Cell { return t.min; }},
         {"max", [](const Trend& t) -> Cell { return t.max; }},
         {"crossed_step", [](const Trend& t) { return t.crossed_step ? Cell{*t.crossed_step} : Cell{}; }},
         {"threshold", [](const Trend& t) { return optional_number(t.threshold); }}},
        trends);
}

Table alerts_table(const std::vector<Alert>& alerts) {
    return make_table<Alert>(
        {{"step", [](const Alert& a) -> Cell { return a.step; }},
         {"kind", [](const Alert& a) -> Cell { return std::string(alert_kind_name(a.kind)); }},
         {"tensor", [](const Alert& a) -> Cell { return a.tensor; }},
         {"layer", [](const Alert& a) { return optional_count(a.layer); }},
         {"role", [](const Alert& a) { return role_cell(a.role); }},
         {"head", [](const Alert& a) { return optional_count(a.head); }},
         {"field", [](const Alert& a) -> Cell { return a.field; }},
         {"value", [](const Alert& a) -> Cell { return a.value; }},
         {"previous", [](const Alert& a) -> Cell { return a.previous; }},
         {"threshold", [](const Alert& a) -> Cell { return a.threshold; }},
         {"message", [](const Alert& a) -> Cell { return a.message; }}},
        alerts);
}

}  // namespace diffract::watch
