#include "diffract/run/head_scores.hpp"

#include <set>

#include "diffract/core/error.hpp"
#include "diffract/run/compare.hpp"

namespace diffract::run {
namespace {

// The compare job of a rewind's ranking: `tuned` against `base` (and `reference`) over `roles` of the
// layers and names the selection admits; its rows of `units` (the heads' or the experts') that are not
// the reference's own. Rewind ranks units of models that must match the base: no --allow-partial hint.
template <typename Row>
std::vector<Row> ranked_units(const formats::Checkpoint& base, const formats::Checkpoint& tuned,
                              const formats::Checkpoint* reference, RunOptions run,
                              std::set<model::Role> roles, bool heads,
                              std::vector<Row> CompareResult::*units) {
    CompareOptions o;
    o.base = base;
    o.models = {tuned};
    if (reference) o.reference = *reference;
    o.heads = heads;
    o.suggest_allow_partial = false;
    run.selection.roles = std::move(roles);
    o.run = std::move(run);
    auto result = compare(o);
    std::vector<Row> out;
    for (auto& u : result.*units)
        if (u.reference.empty() || u.model != u.reference) out.push_back(std::move(u));
    return out;
}

}  // namespace

std::vector<analysis::HeadRow> head_scores(const formats::Checkpoint& base, const formats::Checkpoint& tuned,
                                           const formats::Checkpoint* reference, RunOptions run) {
    auto out = ranked_units(base, tuned, reference, std::move(run),
                            {model::Role::attn_q, model::Role::attn_k, model::Role::attn_v,
                             model::Role::attn_o, model::Role::attn_qkv},
                            true, &CompareResult::heads);
    if (out.empty()) throw_input_error(tuned.path, "", "no attention heads to rank (head geometry unknown?)");
    return out;
}

std::vector<analysis::ExpertRow> expert_scores(const formats::Checkpoint& base,
                                               const formats::Checkpoint& tuned,
                                               const formats::Checkpoint* reference, RunOptions run) {
    auto out = ranked_units(base, tuned, reference, std::move(run),
                            {model::Role::mlp_gate, model::Role::mlp_up, model::Role::mlp_down,
                             model::Role::mlp_gate_up, model::Role::router},
                            false, &CompareResult::experts);
    if (out.empty())
        throw_input_error(tuned.path, "", "no experts to rank (not a mixture of experts, or none selected)");
    return out;
}

}  // namespace diffract::run
