#include "diffract/analysis/expert_ranking.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <tuple>

#include <fmt/format.h>

namespace diffract::analysis {
namespace {

using Key = std::tuple<int, int>;  // layer, expert (-1: the layer's shared experts)

int block_of(model::Role role) {
    return role == model::Role::mlp_down ? 2 : (role == model::Role::mlp_up ? 1 : 0);
}

// Per expert of `kind`, in (layer, expert) order: its blocks' update norms and base norms, agreement the
// mean of 0.5 (l + r) over its matrices, pl_ks their mean. HeadStats' `head` is the expert index.
std::vector<HeadStats> expert_stats(const std::vector<ExpertMatrix>& matrices, model::ExpertKind kind) {
    struct Sums {
        HeadStats stats;
        double agreement = 0, pl_ks = 0;
        int n = 0;
    };
    std::map<Key, Sums> experts;
    for (const auto& m : matrices) {
        if (m.kind != kind) continue;
        auto& e = experts[{m.layer, m.expert.value_or(-1)}];
        e.stats.layer = m.layer, e.stats.head = m.expert.value_or(-1);
        const int b = block_of(m.role);
        e.stats.block_norm[b] = m.delta_frob_norm;
        e.stats.base_block_norm[b] = m.rel_delta_frob_norm > 0 ? m.delta_frob_norm / m.rel_delta_frob_norm
                                                               : std::numeric_limits<double>::quiet_NaN();
        e.agreement += 0.5 * (m.avg_l_agreement + m.avg_r_agreement);
        e.pl_ks += m.pl_ks;
        ++e.n;
    }
    std::vector<HeadStats> out;
    for (auto& [key, e] : experts) {
        e.stats.agreement = e.agreement / e.n;
        e.stats.pl_ks = e.pl_ks / e.n;
        out.push_back(e.stats);
    }
    return out;
}

void note_uniform_experts(const std::string& model, const NoiseFloor& floor,
                          std::vector<std::string>& findings) {
    const auto largest = uniform_update(floor);
    if (!largest) return;
    findings.push_back(
        fmt::format("{}: no routed expert's update stands out from the others' (largest robust z {:.2f}; the "
                    "heads' noise "
                    "floor): its expert ranking orders noise (docs/formats/moe.md)",
                    model, *largest));
}

}  // namespace

std::vector<RouterRow> router_drift(int layer, const std::vector<double>& base,
                                    const std::vector<double>& model, std::int64_t experts,
                                    std::int64_t hidden) {
    std::vector<RouterRow> out;
    for (std::int64_t e = 0; e < experts; ++e) {
        double d2 = 0, b2 = 0, m2 = 0, dot = 0;
        for (std::int64_t j = 0; j < hidden; ++j) {
            const auto i = static_cast<std::size_t>(e * hidden + j);
            const double b = base[i], m = model[i];
            d2 += (m - b) * (m - b), b2 += b * b, m2 += m * m, dot += b * m;
        }
        RouterRow r;
        r.layer = layer, r.expert = static_cast<int>(e);
        r.update_norm = std::sqrt(d2);
        const double denom = std::sqrt(b2 * m2);
        r.angle = denom > 0 ? std::acos(std::clamp(dot / denom, -1.0, 1.0)) * 180.0 / std::numbers::pi
                            : std::numeric_limits<double>::quiet_NaN();
        out.push_back(r);
    }
    return out;
}

HeadRow unit_row(const ExpertRow& e) {
    HeadRow h;
    h.model = e.model, h.reference = e.reference;
    h.layer = e.layer, h.head = e.expert.value_or(-1), h.kv_head = h.head;
    h.domain = e.domain, h.ref = e.ref, h.ranked = e.ranked;
    h.update_z = e.update_z, h.stands_out = e.stands_out;
    return h;
}

std::vector<ExpertRow> rank_model_experts(const std::vector<ModelExperts>& models, int reference,
                                          const HeadRankOptions& options,
                                          std::vector<std::string>& findings) {
    std::vector<ExpertRow> rows;
    for (const auto kind : {model::ExpertKind::routed, model::ExpertKind::shared}) {
        std::vector<HeadStats> ref_stats;
        if (reference >= 0)
            ref_stats = expert_stats(models[static_cast<std::size_t>(reference)].matrices, kind);
        std::map<Key, const HeadStats*> ref_of;
        for (const auto& r : ref_stats) ref_of[{r.layer, r.head}] = &r;
        for (std::size_t m = 0; m < models.size(); ++m) {
            if (static_cast<int>(m) == reference) continue;
            const auto dom = expert_stats(models[m].matrices, kind);
            if (dom.empty()) continue;
            std::vector<double> relative;
            for (const auto& s : dom) relative.push_back(s.relative_update());
            const auto floor = noise_floor(relative);
            if (kind == model::ExpertKind::routed) note_uniform_experts(models[m].model, floor, findings);
            const auto ranked = rank_heads(dom, reference >= 0 ? &ref_stats : nullptr, options);
            std::map<Key, RouterRow> router;
            for (const auto& r : models[m].router) router[{r.layer, r.expert}] = r;
            for (std::size_t i = 0; i < dom.size(); ++i) {
                ExpertRow row;
                row.model = models[m].model;
                row.reference = reference >= 0 ? models[static_cast<std::size_t>(reference)].model : "";
                row.layer = dom[i].layer, row.kind = kind;
                if (kind == model::ExpertKind::routed) row.expert = dom[i].head;
                row.domain = dom[i];
                if (auto it = ref_of.find({dom[i].layer, dom[i].head}); it != ref_of.end())
                    row.ref = *it->second;
                row.ranked = ranked[i];
                row.update_z = floor.z[i];
                row.stands_out = floor.stands_out[i] != 0;
                if (auto it = router.find({dom[i].layer, dom[i].head}); it != router.end() && row.expert)
                    row.router = it->second;
                rows.push_back(row);
            }
        }
    }
    return rows;
}

}  // namespace diffract::analysis
