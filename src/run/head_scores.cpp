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

}  // namespace diffract::run
