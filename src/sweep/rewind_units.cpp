// The rewind sweeps' units, heads or experts, behind one interface (rewind_candidates_impl.hpp).
#include <algorithm>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/run/head_scores.hpp"
#include "rewind_candidates_impl.hpp"

namespace diffract::sweep {

std::string unit_table_file(Kind kind, edit::RewindUnit unit) {
    const std::string file(kind_info(kind).table_file);
    if (unit == edit::RewindUnit::heads || !file.starts_with("heads_")) return file;
    return "experts_" + file.substr(std::string_view("heads_").size());
}

namespace detail {
namespace {

bool experts(const RewindSweep& w) { return w.unit == edit::RewindUnit::experts; }

std::vector<edit::RewindExpert> as_experts(const std::vector<edit::RewindHead>& units) {
    std::vector<edit::RewindExpert> out;
    for (const auto& u : units) out.push_back({u.layer, u.head, u.ranked});
    return out;
}

std::vector<edit::RewindHead> as_units(const std::vector<edit::RewindExpert>& experts) {
    std::vector<edit::RewindHead> out;
    for (const auto& e : experts) out.push_back({e.layer, e.expert.value_or(-1), e.ranked});
    return out;
}

}  // namespace

std::vector<analysis::HeadRow> unit_scores(const formats::Checkpoint& base, const formats::Checkpoint& model,
                                           const formats::Checkpoint* reference, const RewindSweep& w) {
    if (!experts(w)) return run::head_scores(base, model, reference, w.run);
    std::vector<analysis::HeadRow> rows;
    for (const auto& e : run::expert_scores(base, model, reference, w.run))
        if (e.kind == model::ExpertKind::routed && e.expert) rows.push_back(analysis::unit_row(e));
    if (rows.empty())
        throw_input_error(model.path, "", "no routed experts to rank (--unit experts ranks routed experts)");
    return rows;
}

std::vector<edit::RewindHead> matched_random_units(const RewindSweep& w,
                                                   const std::vector<analysis::HeadRow>& scores,
                                                   const std::vector<edit::RewindHead>& like,
                                                   std::uint64_t seed) {
    if (!experts(w)) return edit::matched_random_heads(scores, like, seed);
    std::vector<edit::RewindExpert> pool;
    for (const auto& s : scores) pool.push_back({s.layer, s.head, {}});
    return as_units(edit::matched_random_experts(w.model, pool, as_experts(like), seed, w.common.selection));
}

std::vector<std::pair<std::string, std::int64_t>> rewound_columns(
    const RewindSweep& w, const std::vector<edit::RewindHead>& units) {
    if (experts(w)) {
        const auto a = edit::rewound_expert_amount(w.model, as_experts(units), w.common.selection);
        return {{"experts", a.experts}, {"parameters", a.parameters}};
    }
    const auto a = edit::rewound_amount(w.model, units, w.kv, w.common.selection);
    return {{"query_heads", a.query_heads}, {"kv_blocks", a.kv_blocks}, {"parameters", a.parameters}};
}

std::string units_content(const RewindSweep& w, std::vector<edit::RewindHead> units) {
    std::sort(units.begin(), units.end(), [](const auto& a, const auto& b) {
        return std::pair(a.layer, a.head) < std::pair(b.layer, b.head);
    });
    // Heads keep the key they always had, so that journals of earlier sweeps still resume.
    std::string s = experts(w) ? std::string("rewind/experts:")
                               : fmt::format("rewind/kv={}:", name_of(edit::kKvPolicyNames, w.kv));
    for (const auto& u : units) s += fmt::format("{}.{},", u.layer, u.head);
    return s;
}

Candidate rewind_candidate(const RewindSweep& w, std::vector<edit::RewindHead> units, bool with_amount) {
    Candidate c;
    c.content = units_content(w, units);
    if (units.empty()) c.same_as = RefRole::model;
    if (with_amount) c.columns = rewound_columns(w, units);
    if (experts(w))
        c.build = [&w, experts = as_experts(units)](const std::string& dir) {
            edit::rewind_experts(dir, w.base, w.model, experts, edit::RouterRows::keep, w.common);
        };
    else
        c.build = [&w, heads = std::move(units)](const std::string& dir) {
            edit::rewind(dir, w.base, w.model, heads, w.kv, w.common);
        };
    return c;
}

std::string unit_label(const RewindSweep& w, const edit::RewindHead& unit) {
    return fmt::format("L{}_{}{}", unit.layer, edit::rewind_unit_words(w.unit).letter, unit.head);
}

SweepConfig sized(const SweepConfig& config, const formats::Checkpoint& primary) {
    SweepConfig c = config;
    c.candidate_bytes = edit::checkpoint_bytes(primary);
    return c;
}

}  // namespace detail
}  // namespace diffract::sweep
