// Head rewind: the Q, K, V and O blocks of chosen heads take the base's bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/edit/edit.hpp"
#include "rewind_impl.hpp"

namespace diffract::edit {

OBias parse_o_bias(const std::string& text) {
    if (const auto b = value_of(kOBiasNames, text)) return *b;
    throw InputError(fmt::format("--o-bias: expected {}, found '{}'", choice_list(kOBiasNames), text));
}

KvPolicy parse_kv_policy(const std::string& text) {
    if (const auto kv = value_of(kKvPolicyNames, text)) return *kv;
    throw InputError(fmt::format("--kv-policy: expected {}, found '{}'", choice_list(kKvPolicyNames), text));
}

void check_rewind_heads_choice(bool fraction_given, bool heads_given) {
    if (fraction_given == heads_given)
        throw InputError("edit rewind: give exactly one of --fraction and --heads");
}

std::vector<RewindHead> lowest_heads(const std::vector<analysis::HeadRow>& scores,
                                     const analysis::HeadRankOptions& ranking, double fraction) {
    if (!(fraction >= 0 && fraction <= 1))
        throw InputError(fmt::format("--fraction: expected a value in [0, 1], found {}", fraction));
    std::vector<analysis::HeadStats> dom, ref;
    bool has_ref = false;
    for (const auto& h : scores) {
        dom.push_back(h.domain);
        ref.push_back(h.ref);
        has_ref = has_ref || !h.reference.empty();
    }
    const auto ranked = analysis::rank_heads(dom, has_ref ? &ref : nullptr, ranking);
    const auto count = static_cast<int>(std::llround(fraction * static_cast<double>(ranked.size())));
    std::vector<RewindHead> out;
    for (const auto& r : ranked)
        if (r.rank < count) out.push_back({r.layer, r.head, r});
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.ranked.rank < b.ranked.rank; });
    return out;
}

namespace detail {

HeadSet head_set(const std::vector<RewindHead>& heads, const model::ModelSchema& schema, KvPolicy kv,
                 const std::string& path) {
    if (!schema.heads)
        throw_input_error(path, "", "head geometry unknown (config.json): cannot rewind heads");
    const auto& g = *schema.heads;
    HeadSet s;
    for (const auto& h : heads) {
        if (h.head >= g.n_heads)
            throw_input_error(path, "",
                              fmt::format("head {} of layer {} does not exist (the model has {} heads)",
                                          h.head, h.layer, g.n_heads));
        s.q[h.layer].insert(h.head);
    }
    for (const auto& [layer, qs] : s.q)
        for (int k = 0; k < g.n_kv_heads; ++k) {
            int in_group = 0;
            for (int h = k * g.group_size(); h < (k + 1) * g.group_size(); ++h)
                in_group += qs.count(h) ? 1 : 0;
            if (kv == KvPolicy::any ? in_group > 0 : in_group == g.group_size()) s.kv[layer].insert(k);
        }
    return s;
}

void rewind_bias(const TensorInfo& cpt, const TensorInfo& pre, const formats::Checkpoint& model,
                 model::Role role, const std::function<bool(const model::HeadBlock&)>& take,
                 std::span<std::byte> out) {
    const auto stem = cpt.name.substr(0, cpt.name.size() - std::string_view("bias").size());
    const TensorInfo* weight = model.find(stem + "weight");
    if (!weight || weight->shape.size() != 2) return;  // no weight to map heads through: kept as is
    const auto es = dtype_size(cpt.dtype);
    const auto n = static_cast<std::int64_t>(cpt.shape[0]);
    const auto src = pre.bytes();
    bool whole = false;
    for (const auto& hb : model::head_blocks(model.schema, *weight, role)) {
        if (!take(hb)) continue;
        if (hb.proj == model::Role::attn_o) {
            whole = true;
            continue;
        }
        const auto& b = hb.block;
        const std::int64_t first = b.transposed ? b.col0 : b.row0, count = b.transposed ? b.cols : b.rows;
        if (first < 0 || first + count > n)
            throw_input_error(cpt.path(), cpt.name,
                              fmt::format("bias of {} entries does not cover head {}'s rows [{}, {})", n,
                                          hb.head, first, first + count));
        std::memcpy(out.data() + first * es, src.data() + first * es, static_cast<std::size_t>(count) * es);
    }
    if (whole) std::memcpy(out.data(), src.data(), out.size());
}

bool any_bias_rewound(const formats::Checkpoint& model, const std::string& bias_name,
                      const model::TensorRole& role, const HeadSet& set, OBias o_bias,
                      const analysis::Selection& selection) {
    if (!role.layer) return false;
    const TensorInfo* weight =
        model.find(bias_name.substr(0, bias_name.size() - std::string_view("bias").size()) + "weight");
    if (!weight || weight->shape.size() != 2) return false;
    const auto blocks = model::head_blocks(model.schema, *weight, role.role);
    return std::any_of(blocks.begin(), blocks.end(), [&](const model::HeadBlock& hb) {
        return set.rewinds_bias(*role.layer, hb, o_bias, selection);
    });
}

void require_same_dtype(const TensorInfo& pre, const TensorInfo& cpt) {
    if (pre.dtype != cpt.dtype)
        throw_input_error(
            pre.path(), pre.name,
            fmt::format("dtype differs from the model's (expected {}, found {}): rewind copies bytes",
                        dtype_name(cpt.dtype), dtype_name(pre.dtype)));
}

nlohmann::json rewind_parameters(const std::vector<RewindHead>& heads, KvPolicy kv, OBias o_bias) {
    nlohmann::json rewound = nlohmann::json::array();
    for (const auto& h : heads) rewound.push_back({h.layer, h.head});
    return {{"heads", rewound},
            {"kv_policy", std::string(name_of(kKvPolicyNames, kv))},
            {"o_bias", std::string(name_of(kOBiasNames, o_bias))}};
}

}  // namespace detail

using detail::head_set;
using detail::HeadSet;
using detail::rewind_bias;

Table rewound_heads_table(const std::vector<RewindHead>& heads, const formats::Checkpoint& model, KvPolicy kv,
                          OBias o_bias) {
    const auto set = head_set(heads, model.schema, kv, model.path);
    const auto& g = *model.schema.heads;
    const auto count = [](std::int64_t v) { return Cell{v}; };
    return make_table<RewindHead>(
        {{"layer", [&](const RewindHead& h) { return count(h.layer); }},
         {"head", [&](const RewindHead& h) { return count(h.head); }},
         {"kv_head", [&](const RewindHead& h) { return count(g.kv_head_of(h.head)); }},
         {"kv_rewound",
          [&](const RewindHead& h) { return count(set.has_kv(h.layer, g.kv_head_of(h.head))); }},
         {"rank", [&](const RewindHead& h) { return count(h.ranked.rank); }},
         {"key", [](const RewindHead& h) -> Cell { return h.ranked.key; }},
         {"importance", [](const RewindHead& h) -> Cell { return h.ranked.importance; }},
         {"update_norm", [](const RewindHead& h) -> Cell { return h.ranked.update_norm; }},
         {"ref_update_norm", [](const RewindHead& h) -> Cell { return h.ranked.ref_update_norm; }},
         {"o_bias",
          [o_bias](const RewindHead&) -> Cell { return std::string(name_of(kOBiasNames, o_bias)); }}},
        heads);
}

std::string rewound_heads_csv(const std::vector<RewindHead>& heads, const formats::Checkpoint& model,
                              KvPolicy kv, OBias o_bias) {
    return to_csv(rewound_heads_table(heads, model, kv, o_bias));
}

EditSummary rewind(const std::string& out_dir, const formats::Checkpoint& base,
                   const formats::Checkpoint& model, const std::vector<RewindHead>& heads, KvPolicy kv,
                   const EditCommon& common, OBias o_bias) {
    check_heads(heads, model, common.selection);
    const auto set = head_set(heads, model.schema, kv, model.path);
    EditJob job;
    job.record = {"rewind", detail::rewind_parameters(heads, kv, o_bias)};
    job.primary = &model;
    job.aligned = {&base};
    job.editable = Editable::attention_heads;
    job.common = common;
    job.common.extra_files["rewound_heads.csv"] = rewound_heads_csv(heads, model, kv, o_bias);
    // Only tensors holding a rewound head (or its bias slice) are rewritten: the others keep their
    // stored bytes and type (a quantised GGUF tensor stays quantised).
    job.touches = [&](const EditTensor& t) {
        if (!t.role.layer) return false;
        const int layer = *t.role.layer;
        const auto& cpt = *t.tensor;
        if (cpt.shape.size() == 1)
            return detail::any_bias_rewound(model, cpt.name, t.role, set, o_bias, common.selection);
        const auto blocks = model::head_blocks(*t.schema, cpt, t.role.role);
        return std::any_of(blocks.begin(), blocks.end(), [&](const model::HeadBlock& hb) {
            return common.selection.selects_role(hb.proj) && set.rewinds(layer, hb);
        });
    };
    job.edit = [&](const EditTensor& t, std::span<std::byte> out) {
        const auto& cpt = *t.tensor;
        const auto& pre = *t.inputs[0];
        detail::require_same_dtype(pre, cpt);
        std::memcpy(out.data(), cpt.bytes().data(), out.size());
        if (!t.role.layer) return;
        const int layer = *t.role.layer;
        const auto es = static_cast<std::int64_t>(dtype_size(cpt.dtype));
        if (cpt.shape.size() == 1) {
            rewind_bias(
                cpt, pre, model, t.role.role,
                [&](const model::HeadBlock& hb) {
                    return set.rewinds_bias(layer, hb, o_bias, common.selection);
                },
                out);
            return;
        }
        const std::int64_t cols = stored_cols(cpt);
        const auto src = pre.bytes();
        for (const auto& hb : model::head_blocks(*t.schema, cpt, t.role.role)) {
            if (!common.selection.selects_role(hb.proj)) continue;
            if (!set.rewinds(layer, hb)) continue;
            const auto& b = hb.block;  // stored coordinates
            for (std::int64_t r = b.row0; r < b.row0 + b.rows; ++r) {
                const auto off = static_cast<std::size_t>((r * cols + b.col0) * es);
                std::memcpy(out.data() + off, src.data() + off, static_cast<std::size_t>(b.cols * es));
            }
        }
    };
    return run_edit(out_dir, job);
}

}  // namespace diffract::edit
