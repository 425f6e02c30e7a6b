// Expert rewind: the chosen experts of a mixture of experts take the base's values in every matrix and
// bias of theirs (and, on request, their router rows); the matched random sets the sweeps compare them
// with.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/random.hpp"
#include "diffract/edit/edit.hpp"
#include "rewind_impl.hpp"

namespace diffract::edit {
namespace {

using ExpertKey = std::pair<int, int>;  // layer, expert (-1: the layer's shared experts)

ExpertKey key_of(const RewindExpert& e) { return {e.layer, e.expert.value_or(-1)}; }

// The expert a tensor belongs to, when it is an expert's matrix or bias.
std::optional<ExpertKey> expert_of(const model::TensorRole& r) {
    if (!r.layer || !model::role_is_mlp_projection(r.role)) return std::nullopt;
    if (r.expert_kind == model::ExpertKind::routed && r.expert) return ExpertKey{*r.layer, *r.expert};
    if (r.expert_kind == model::ExpertKind::shared) return ExpertKey{*r.layer, -1};
    return std::nullopt;
}

// Each expert's weight entries in the tensors the selection admits (floating tensors only: what the
// rewind can write).
std::map<ExpertKey, std::int64_t> expert_sizes(const formats::Checkpoint& model,
                                               const analysis::Selection& selection) {
    std::map<ExpertKey, std::int64_t> sizes;
    for (const auto& t : model.tensors) {
        const auto r = model::classify_tensor(t.name);
        const auto key = expert_of(r);
        if (key && dtype_is_float(t.dtype) && selection.selects(t.name, r)) sizes[*key] += t.numel();
    }
    return sizes;
}

std::string expert_text(const RewindExpert& e) {
    return e.expert ? fmt::format("expert {} of layer {}", *e.expert, e.layer)
                    : fmt::format("the shared experts of layer {}", e.layer);
}

void check_experts(const std::vector<RewindExpert>& experts, const std::map<ExpertKey, std::int64_t>& sizes,
                   const formats::Checkpoint& model) {
    std::set<ExpertKey> seen;
    for (const auto& e : experts) {
        if (!seen.insert(key_of(e)).second)
            throw_input_error(model.path, "", fmt::format("{} is listed twice", expert_text(e)));
        if (!sizes.count(key_of(e)))
            throw_input_error(model.path, "",
                              fmt::format("{} is not among the model's experts that the selection edits "
                                          "(the model has {} such experts)",
                                          expert_text(e), sizes.size()));
    }
}

// Per layer, the routed experts whose router rows take the base's values.
std::map<int, std::set<int>> router_rows_of(const std::vector<RewindExpert>& experts, RouterRows router) {
    std::map<int, std::set<int>> rows;
    if (router == RouterRows::base)
        for (const auto& e : experts)
            if (e.expert) rows[e.layer].insert(*e.expert);
    return rows;
}

// Copies rows `experts` of a router (its plain view: a row per expert, or one entry per expert for its
// bias) from `pre` into `out`.
void rewind_router_rows(const TensorInfo& cpt, const TensorInfo& pre, const std::set<int>& experts,
                        std::span<std::byte> out) {
    const auto n_experts = static_cast<std::int64_t>(cpt.shape[0]);
    const auto row_bytes = out.size() / static_cast<std::size_t>(n_experts);
    for (const int e : experts) {
        if (e >= n_experts)
            throw_input_error(cpt.path(), cpt.name,
                              fmt::format("router has {} rows: expert {} has none", n_experts, e));
        const auto off = static_cast<std::size_t>(e) * row_bytes;
        std::memcpy(out.data() + off, pre.bytes().data() + off, row_bytes);
    }
}

// rewound_experts.csv's table, with each expert's size (expert_sizes).
Table experts_table(const std::vector<RewindExpert>& experts, const std::map<ExpertKey, std::int64_t>& sizes,
                    RouterRows router) {
    const auto count = [](std::int64_t v) { return Cell{v}; };
    return make_table<RewindExpert>(
        {{"layer", [&](const RewindExpert& e) { return count(e.layer); }},
         {"expert", [](const RewindExpert& e) { return e.expert ? Cell{std::int64_t{*e.expert}} : Cell{}; }},
         {"expert_kind",
          [](const RewindExpert& e) -> Cell {
              return std::string(
                  model::expert_kind_name(e.expert ? model::ExpertKind::routed : model::ExpertKind::shared));
          }},
         {"rank", [&](const RewindExpert& e) { return count(e.ranked.rank); }},
         {"key", [](const RewindExpert& e) -> Cell { return e.ranked.key; }},
         {"importance", [](const RewindExpert& e) -> Cell { return e.ranked.importance; }},
         {"update_norm", [](const RewindExpert& e) -> Cell { return e.ranked.update_norm; }},
         {"ref_update_norm", [](const RewindExpert& e) -> Cell { return e.ranked.ref_update_norm; }},
         {"parameters",
          [&](const RewindExpert& e) {
              const auto it = sizes.find(key_of(e));
              return count(it == sizes.end() ? 0 : it->second);
          }},
         {"router",
          [router](const RewindExpert&) -> Cell { return std::string(name_of(kRouterRowsNames, router)); }}},
        experts);
}

}  // namespace

RewindUnit parse_rewind_unit(const std::string& text) {
    if (const auto u = value_of(kRewindUnitNames, text)) return *u;
    throw InputError(fmt::format("--unit: expected {}, found '{}'", choice_list(kRewindUnitNames), text));
}

RewindUnit rewind_unit_of(const std::string& unit, const std::string& experts) {
    if (!unit.empty()) return parse_rewind_unit(unit);
    return experts.empty() ? RewindUnit::heads : RewindUnit::experts;
}

RouterRows parse_router_rows(const std::string& text) {
    if (const auto r = value_of(kRouterRowsNames, text)) return *r;
    throw InputError(fmt::format("--router: expected {}, found '{}'", choice_list(kRouterRowsNames), text));
}

std::vector<RewindExpert> selected_experts(const formats::Checkpoint& model,
                                           const analysis::Selection& selection) {
    std::vector<RewindExpert> out;
    for (const auto& [key, size] : expert_sizes(model, selection)) {
        RewindExpert e;
        e.layer = key.first;
        if (key.second >= 0) e.expert = key.second;
        e.ranked.layer = key.first, e.ranked.head = key.second;
        out.push_back(e);
    }
    return out;
}

std::vector<RewindExpert> lowest_experts(const std::vector<analysis::ExpertRow>& scores,
                                         const analysis::HeadRankOptions& ranking, double fraction) {
    std::vector<analysis::HeadRow> routed;
    for (const auto& s : scores)
        if (s.kind == model::ExpertKind::routed && s.expert) routed.push_back(analysis::unit_row(s));
    std::vector<RewindExpert> out;
    for (const auto& h : lowest_heads(routed, ranking, fraction)) out.push_back({h.layer, h.head, h.ranked});
    return out;
}

RewoundExperts rewound_expert_amount(const formats::Checkpoint& model,
                                     const std::vector<RewindExpert>& experts,
                                     const analysis::Selection& selection) {
    const auto sizes = expert_sizes(model, selection);
    RewoundExperts a;
    a.experts = static_cast<std::int64_t>(experts.size());
    for (const auto& e : experts)
        if (const auto it = sizes.find(key_of(e)); it != sizes.end()) a.parameters += it->second;
    return a;
}

std::vector<RewindExpert> matched_random_experts(const formats::Checkpoint& model,
                                                 const std::vector<RewindExpert>& pool,
                                                 const std::vector<RewindExpert>& like, std::uint64_t seed,
                                                 const analysis::Selection& selection) {
    const auto sizes = expert_sizes(model, selection);
    const auto size_of = [&](const RewindExpert& e) {
        const auto it = sizes.find(key_of(e));
        return it == sizes.end() ? std::int64_t{0} : it->second;
    };
    // The pool's experts by size, in a fixed order; how many of each size `like` holds.
    std::map<std::int64_t, std::vector<RewindExpert>> by_size;
    for (const auto& e : pool) by_size[size_of(e)].push_back(e);
    std::map<std::int64_t, std::size_t> wanted;
    for (const auto& e : like) ++wanted[size_of(e)];
    std::uint64_t state = seed;
    std::vector<RewindExpert> out;
    for (auto& [size, experts] : by_size) {
        const auto n = std::min(wanted[size], experts.size());  // `like` is drawn from `pool`: all of them
        shuffle(std::span(experts), state);
        for (std::size_t i = 0; i < n; ++i) {
            auto e = experts[i];
            e.ranked = {};
            e.ranked.layer = e.layer, e.ranked.head = e.expert.value_or(-1);
            out.push_back(e);
        }
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return key_of(a) < key_of(b); });
    return out;
}

EditSummary rewind_experts(const std::string& out_dir, const formats::Checkpoint& base,
                           const formats::Checkpoint& model, const std::vector<RewindExpert>& experts,
                           RouterRows router, const EditCommon& common) {
    const auto sizes = expert_sizes(model, common.selection);
    check_experts(experts, sizes, model);
    std::set<ExpertKey> rewound;
    for (const auto& e : experts) rewound.insert(key_of(e));
    const auto router_rows = router_rows_of(experts, router);
    nlohmann::json listed = nlohmann::json::array();
    for (const auto& e : experts)
        listed.push_back({e.layer, e.expert ? nlohmann::json(*e.expert) : "shared"});
    EditJob job;
    job.record = {"rewind",
                  {{"unit", std::string(name_of(kRewindUnitNames, RewindUnit::experts))},
                   {"experts", listed},
                   {"router", std::string(name_of(kRouterRowsNames, router))}}};
    job.primary = &model;
    job.aligned = {&base};
    job.editable = Editable::any_float;
    // The selection chose the experts (check_experts) and which of their tensors are rewound (`touches`);
    // a router is rewound for its rows whatever it names.
    job.common = common;
    job.common.selection = {};
    job.common.extra_files["rewound_experts.csv"] = to_csv(experts_table(experts, sizes, router));
    // A router is rewritten only for its rewound rows; every other tensor but the rewound experts' keeps
    // its stored bytes.
    const auto router_of = [&](const EditTensor& t) -> const std::set<int>* {
        if (t.role.role != model::Role::router || !t.role.layer) return nullptr;
        const auto it = router_rows.find(*t.role.layer);
        return it == router_rows.end() ? nullptr : &it->second;
    };
    job.touches = [&](const EditTensor& t) {
        const auto key = expert_of(t.role);
        return (key && rewound.count(*key) && common.selection.selects(t.tensor->name, t.role)) ||
               router_of(t) != nullptr;
    };
    job.edit = [&](const EditTensor& t, std::span<std::byte> out) {
        const auto& cpt = *t.tensor;
        const auto& pre = *t.inputs[0];
        detail::require_same_dtype(pre, cpt);
        if (const auto* rows = router_of(t)) {
            std::memcpy(out.data(), cpt.bytes().data(), out.size());
            rewind_router_rows(cpt, pre, *rows, out);
            return;
        }
        std::memcpy(out.data(), pre.bytes().data(), out.size());
    };
    return run_edit(out_dir, job);
}

}  // namespace diffract::edit
