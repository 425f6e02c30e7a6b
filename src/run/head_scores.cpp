#include "diffract/run/head_scores.hpp"

#include "diffract/core/error.hpp"
#include "diffract/run/compare.hpp"

namespace diffract::run {

std::vector<analysis::HeadRow> head_scores(const formats::Checkpoint& base, const formats::Checkpoint& tuned,
                                           const formats::Checkpoint* reference, RunOptions run) {
    CompareOptions o;
    o.base = base;
    o.models = {tuned};
    if (reference) o.reference = *reference;
    o.heads = true;
    o.suggest_allow_partial = false;  // rewind ranks heads of models that must match the base
    run.selection.roles = {model::Role::attn_q, model::Role::attn_k, model::Role::attn_v, model::Role::attn_o,
                           model::Role::attn_qkv};
    o.run = std::move(run);
    auto result = compare(o);
    std::vector<analysis::HeadRow> out;
    for (auto& h : result.heads)
        if (h.reference.empty() || h.model != h.reference) out.push_back(std::move(h));
    if (out.empty()) throw_input_error(tuned.path, "", "no attention heads to rank (head geometry unknown?)");
    return out;
}

std::vector<analysis::ExpertRow> expert_scores(const formats::Checkpoint& base,
                                               const formats::Checkpoint& tuned,
                                               const formats::Checkpoint* reference, RunOptions run) {
    CompareOptions o;
    o.base = base;
    o.models = {tuned};
    if (reference) o.reference = *reference;
    o.heads = false;
    o.suggest_allow_partial = false;
    run.selection.roles = {model::Role::mlp_gate, model::Role::mlp_up, model::Role::mlp_down,
                           model::Role::mlp_gate_up, model::Role::router};
    o.run = std::move(run);
    auto result = compare(o);
    std::vector<analysis::ExpertRow> out;
    for (auto& e : result.experts)
        if (e.reference.empty() || e.model != e.reference) out.push_back(std::move(e));
    if (out.empty())
        throw_input_error(tuned.path, "", "no experts to rank (not a mixture of experts, or none selected)");
    return out;
}

}  // namespace diffract::run
