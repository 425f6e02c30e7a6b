// What a head rewind puts back, and random head sets matched to it: the like-for-like baseline of
// the importance-vs-random comparison under GQA (docs/edit.md, "Matched random baselines").
#include <algorithm>
#include <map>

#include "diffract/core/random.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/model/schema.hpp"
#include "rewind_impl.hpp"

namespace diffract::edit {

RewoundAmount rewound_amount(const formats::Checkpoint& model, const std::vector<RewindHead>& heads,
                             KvPolicy kv, const analysis::Selection& selection) {
    RewoundAmount a;
    a.query_heads = static_cast<std::int64_t>(heads.size());
    if (heads.empty()) return a;
    const auto set = detail::head_set(heads, model.schema, kv, model.path);
    for (const auto& [layer, blocks] : set.kv) a.kv_blocks += static_cast<std::int64_t>(blocks.size());
    // The weight entries the rewind writes back: every head block of an attention projection that the
    // same head set says is rewound (the rewind's own rule, so the count cannot drift from it).
    for (const auto& t : model.tensors) {
        if (t.shape.size() != 2) continue;
        const auto role = model::classify_tensor(t.name);
        if (!role.layer || !model::role_is_attention(role.role) || !selection.selects(t.name, role)) continue;
        for (const auto& hb : model::head_blocks(model.schema, t, role.role))
            if (selection.selects_role(hb.proj) && set.rewinds(*role.layer, hb))
                a.parameters += hb.block.rows * hb.block.cols;
    }
    return a;
}

std::vector<RewindHead> matched_random_heads(const std::vector<analysis::HeadRow>& scores,
                                             const std::vector<RewindHead>& like, std::uint64_t seed) {
    // The key/value groups (layer, kv_head) and their query heads, in a fixed order.
    std::map<std::pair<int, int>, std::vector<int>> groups;
    std::map<std::pair<int, int>, std::pair<int, int>> group_of;  // (layer, head) -> group
    for (const auto& h : scores) {
        groups[{h.layer, h.kv_head}].push_back(h.head);
        group_of[{h.layer, h.head}] = {h.layer, h.kv_head};
    }
    // How many of `like`'s heads fall in each group, as a multiset of counts.
    std::map<std::pair<int, int>, int> taken;
    for (const auto& h : like) ++taken[group_of.at({h.layer, h.head})];
    std::vector<int> counts;
    for (const auto& [g, n] : taken) counts.push_back(n);
    std::sort(counts.rbegin(), counts.rend());
    // Groups drawn at random for the counts, largest count first, each from the groups large enough
    // for it; then heads drawn at random within each group.
    std::vector<std::pair<int, int>> keys;
    for (const auto& [g, heads] : groups) keys.push_back(g);
    std::uint64_t state = seed;
    shuffle(std::span(keys), state);
    std::vector<char> used(keys.size(), 0);
    std::vector<RewindHead> out;
    for (const int n : counts) {
        std::size_t k = 0;
        while (k < keys.size() && (used[k] || groups[keys[k]].size() < static_cast<std::size_t>(n))) ++k;
        if (k == keys.size()) break;  // cannot happen: `like` itself is such an assignment
        used[k] = 1;
        auto heads = groups[keys[k]];
        shuffle(std::span(heads), state);
        for (int i = 0; i < n; ++i) out.push_back({keys[k].first, heads[static_cast<std::size_t>(i)], {}});
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
        return std::pair(a.layer, a.head) < std::pair(b.layer, b.head);
    });
    return out;
}

}  // namespace diffract::edit
