#include "diffract/analysis/head_ranking.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/core/random.hpp"

namespace diffract::analysis {
namespace {

// scale01 of `values` restricted to the indices in `group` (written back at those indices).
void scale_group(const std::vector<double>& values, const std::vector<std::size_t>& group,
                 std::vector<double>& out) {
    std::vector<double> sub;
    sub.reserve(group.size());
    for (auto i : group) sub.push_back(values[i]);
    const auto scaled = scale01(sub);
    for (std::size_t j = 0; j < group.size(); ++j) out[group[j]] = scaled[j];
}

// scale01 over the scope's groups: one group (global) or one per layer.
std::vector<double> scale_scoped(const std::vector<double>& values, const std::vector<int>& layers,
                                 bool per_layer) {
    std::vector<double> out(values.size(), kNaN);
    std::map<int, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < values.size(); ++i) groups[per_layer ? layers[i] : 0].push_back(i);
    for (const auto& [layer, group] : groups) scale_group(values, group, out);
    return out;
}

}  // namespace

HeadStats::HeadStats() : agreement(kNaN), pl_ks(kNaN) {
    std::fill(std::begin(block_norm), std::end(block_norm), kNaN);
    std::fill(std::begin(base_block_norm), std::end(base_block_norm), kNaN);
}

double HeadStats::relative_update() const {
    // A block with no update has no base norm (it is read back from delta / relative delta): it adds
    // nothing to the update and is left out of the base.
    double delta = 0, base = 0;
    bool any = false;
    for (int p = 0; p < kProjections; ++p) {
        if (std::isnan(block_norm[p])) continue;
        any = true;
        delta += block_norm[p] * block_norm[p];
        if (!std::isnan(base_block_norm[p])) base += base_block_norm[p] * base_block_norm[p];
    }
    if (!any) return kNaN;
    if (delta == 0) return 0;
    return base > 0 ? std::sqrt(delta / base) : kNaN;
}

namespace {

// The median of the finite values (NaN when there is none).
double finite_median(const std::vector<double>& values) {
    std::vector<double> v;
    for (double x : values)
        if (std::isfinite(x)) v.push_back(x);
    if (v.empty()) return kNaN;
    const std::size_t n = v.size();
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2), v.end());
    const double hi = v[n / 2];
    if (n % 2) return hi;
    return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2)));
}

}  // namespace

std::vector<double> robust_z(const std::vector<double>& values) {
    std::vector<double> z(values.size(), kNaN);
    const double med = finite_median(values);
    if (std::isnan(med)) return z;
    std::vector<double> dev;
    for (double v : values)
        if (std::isfinite(v)) dev.push_back(std::abs(v - med));
    const double mad = finite_median(dev);
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (!std::isfinite(values[i])) continue;
        const double d = values[i] - med;
        z[i] = mad > 0 ? 0.6745 * d / mad
                       : (d > 0 ? std::numeric_limits<double>::infinity()
                                : (d < 0 ? -std::numeric_limits<double>::infinity() : 0.0));
    }
    return z;
}

double HeadStats::update_norm() const {
    double sum = 0;
    bool any = false;
    for (double n : block_norm)
        if (!std::isnan(n)) sum += n * n, any = true;
    return any ? std::sqrt(sum) : kNaN;
}

HeadRankOptions parse_head_rank_options(std::string_view order, std::string_view scale_scope,
                                        std::uint64_t seed) {
    HeadRankOptions o;
    o.order = parse_head_order(order);
    o.scope = parse_scale_scope(scale_scope);
    o.seed = seed;
    return o;
}

NoiseFloor noise_floor(const std::vector<double>& relative) {
    NoiseFloor f;
    f.z = robust_z(relative);
    if (const double med = finite_median(relative); !std::isnan(med)) f.median = med;
    for (std::size_t i = 0; i < relative.size(); ++i)
        f.stands_out.push_back(std::isfinite(relative[i]) &&
                               ((f.z[i] > kStandsOutZ && relative[i] >= kStandsOutMinRatio * f.median) ||
                                (f.median > 0 && relative[i] >= kStandsOutRatio * f.median)));
    return f;
}

const std::vector<HeadField>& head_fields() {
    static const std::vector<HeadField> f = {
        {"update_norm", "sqrt(q^2 + k^2 + v^2 + o^2) over the head's blocks present"},
        {"q_update_norm", "delta_frob_norm of the head's Q block"},
        {"k_update_norm", "delta_frob_norm of the head's K block (GQA: its key/value head's, in full)"},
        {"v_update_norm", "delta_frob_norm of the head's V block (GQA: its key/value head's, in full)"},
        {"o_update_norm", "delta_frob_norm of the head's O columns"},
        {"ref_update_norm", "update_norm of the reference model"},
        {"ref_q_update_norm", "q_update_norm of the reference model"},
        {"ref_k_update_norm", "k_update_norm of the reference model"},
        {"ref_v_update_norm", "v_update_norm of the reference model"},
        {"ref_o_update_norm", "o_update_norm of the reference model"},
        {"importance", "scale01(update_norm) - scale01(ref_update_norm) over the scale scope"},
        {"agreement", "mean over the head's blocks of (avg_l_agreement + avg_r_agreement) / 2"},
        {"pl_ks", "mean over the head's blocks of the model's pl_ks"},
        {"rank", "0 = least important = the first head to rewind; ties by (layer, head)"},
        {"relative_update", "update_norm / ||W_base||_F over the same blocks"},
        {"update_z",
         "modified z-score 0.6745 (r - median r) / MAD(r) of relative_update among the model's heads"},
        {"stands_out",
         "1 when update_z > 3.5 (Iglewicz-Hoaglin) at >= 1.25 x the median head's relative_update, or "
         "relative_update >= 2 x the median head's: the head's update stands out from the others'"}};
    return f;
}

std::string_view scale_scope_name(ScaleScope s) { return name_of(kScaleScopeNames, s); }
std::string_view head_order_name(HeadOrder o) { return name_of(kHeadOrderNames, o); }

ScaleScope parse_scale_scope(std::string_view t) {
    if (const auto s = value_of(kScaleScopeNames, t)) return *s;
    throw InputError(fmt::format("--scale-scope: expected {}, found '{}'", choice_list(kScaleScopeNames), t));
}

HeadOrder parse_head_order(std::string_view t, std::string_view flag) {
    if (const auto o = value_of(kHeadOrderNames, t)) return *o;
    throw InputError(fmt::format("{}: expected {}, found '{}'", flag, choice_list(kHeadOrderNames), t));
}

std::vector<double> scale01(const std::vector<double>& values) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (double v : values)
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    std::vector<double> out(values.size(), kNaN);
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (!std::isfinite(values[i])) continue;
        out[i] = hi > lo ? (values[i] - lo) / (hi - lo) : 0.0;
    }
    return out;
}

namespace {

// Each head's importance s = scale01(domain) − scale01(reference), per the scope (projection: the mean of
// the per-projection scores); without a reference the second term is 0.
std::vector<double> importance_of(const std::vector<HeadStats>& domain,
                                  const std::vector<const HeadStats*>& ref,
                                  const std::vector<double>& dom_norm, const std::vector<double>& ref_norm,
                                  const std::vector<int>& layers, bool has_reference, ScaleScope scope) {
    const std::size_t n = domain.size();
    auto score = [&](const std::vector<double>& dom, const std::vector<double>& rf, bool per_layer) {
        const auto sd = scale_scoped(dom, layers, per_layer);
        std::vector<double> s(n);
        if (!has_reference) return sd;
        const auto sr = scale_scoped(rf, layers, per_layer);
        for (std::size_t i = 0; i < n; ++i) s[i] = sd[i] - sr[i];
        return s;
    };
    if (scope != ScaleScope::projection) return score(dom_norm, ref_norm, scope == ScaleScope::layer);
    std::vector<double> sum(n, 0.0);
    std::vector<int> count(n, 0);
    for (int p = 0; p < kProjections; ++p) {
        std::vector<double> dom(n), rf(n, kNaN);
        bool present = false;
        for (std::size_t i = 0; i < n; ++i) {
            dom[i] = domain[i].block_norm[p];
            present = present || !std::isnan(dom[i]);
            if (ref[i]) rf[i] = ref[i]->block_norm[p];
        }
        if (!present) continue;  // a projection that was not compared (e.g. --roles) does not count
        const auto s = score(dom, rf, false);
        for (std::size_t i = 0; i < n; ++i)
            if (!std::isnan(s[i])) sum[i] += s[i], ++count[i];
    }
    std::vector<double> importance(n);
    for (std::size_t i = 0; i < n; ++i) importance[i] = count[i] ? sum[i] / count[i] : kNaN;
    return importance;
}

// Each head's key under the order (ascending: rewound first) and its rank, ties broken by (layer, head).
void order_heads(std::vector<RankedHead>& out, const std::vector<HeadStats>& domain,
                 const std::vector<double>& importance, const HeadRankOptions& o) {
    const std::size_t n = domain.size();
    // Heads in (layer, head) order: the tie-break, and the order the random permutation applies to.
    std::vector<std::size_t> by_position(n);
    std::iota(by_position.begin(), by_position.end(), 0);
    std::sort(by_position.begin(), by_position.end(), [&](std::size_t a, std::size_t b) {
        return std::pair(domain[a].layer, domain[a].head) < std::pair(domain[b].layer, domain[b].head);
    });
    std::vector<double> permutation_key(n, 0.0);
    if (o.order == HeadOrder::random) {
        std::vector<std::size_t> perm = by_position;
        std::uint64_t state = o.seed;
        shuffle(std::span<std::size_t>(perm), state);
        for (std::size_t r = 0; r < n; ++r) permutation_key[perm[r]] = static_cast<double>(r);
    }
    for (std::size_t i = 0; i < n; ++i) {
        out[i].importance = importance[i];
        switch (o.order) {
            case HeadOrder::importance:
                out[i].key = importance[i];
                break;
            case HeadOrder::agreement:
                out[i].key = -domain[i].agreement;
                break;
            case HeadOrder::pl_ks:
                out[i].key = -domain[i].pl_ks;
                break;
            case HeadOrder::random:
                out[i].key = permutation_key[i];
                break;
        }
    }
    std::vector<std::size_t> order = by_position;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const double ka = out[a].key, kb = out[b].key;
        if (std::isnan(ka) || std::isnan(kb)) return !std::isnan(ka) && std::isnan(kb);
        return ka < kb;
    });
    for (std::size_t r = 0; r < n; ++r) out[order[r]].rank = static_cast<int>(r);
}

}  // namespace

// The stages: each head's norms (and its reference's), its importance, its key and rank.
std::vector<RankedHead> rank_heads(const std::vector<HeadStats>& domain,
                                   const std::vector<HeadStats>* reference, const HeadRankOptions& o) {
    const std::size_t n = domain.size();
    std::vector<RankedHead> out(n);
    std::map<std::pair<int, int>, const HeadStats*> ref_of;
    if (reference)
        for (const auto& r : *reference) ref_of[{r.layer, r.head}] = &r;
    std::vector<const HeadStats*> ref(n, nullptr);
    std::vector<int> layers(n);
    std::vector<double> dom_norm(n), ref_norm(n, kNaN);
    for (std::size_t i = 0; i < n; ++i) {
        const auto& h = domain[i];
        layers[i] = h.layer;
        dom_norm[i] = h.update_norm();
        if (auto it = ref_of.find({h.layer, h.head}); it != ref_of.end())
            ref[i] = it->second, ref_norm[i] = it->second->update_norm();
        out[i].layer = h.layer;
        out[i].head = h.head;
        out[i].update_norm = dom_norm[i];
        out[i].ref_update_norm = ref_norm[i];
    }
    order_heads(out, domain,
                importance_of(domain, ref, dom_norm, ref_norm, layers, reference != nullptr, o.scope), o);
    return out;
}

namespace {

int projection_index(model::Role role) {
    switch (role) {
        case model::Role::attn_q:
            return 0;
        case model::Role::attn_k:
            return 1;
        case model::Role::attn_v:
            return 2;
        case model::Role::attn_o:
            return 3;
        default:
            return -1;
    }
}

}  // namespace

std::vector<HeadStats> head_stats_of(const std::vector<HeadBlock>& blocks, const model::HeadGeometry& g) {
    std::map<std::pair<int, int>, HeadStats> stats;
    std::map<std::pair<int, int>, std::pair<double, int>> agree, ks;  // sums and counts
    for (const auto& b : blocks) {
        const int p = projection_index(b.role);
        if (p < 0) continue;
        std::vector<int> query_heads;
        if (p == 1 || p == 2) {
            for (int h = 0; h < g.n_heads; ++h)
                if (g.kv_head_of(h) == b.head) query_heads.push_back(h);
        } else {
            query_heads.push_back(b.head);
        }
        for (int h : query_heads) {
            const std::pair key{b.layer, h};
            auto& s = stats[key];
            s.layer = b.layer, s.head = h;
            s.block_norm[p] = b.delta_frob_norm;
            s.base_block_norm[p] =
                b.rel_delta_frob_norm > 0 ? b.delta_frob_norm / b.rel_delta_frob_norm : kNaN;
            auto& a = agree[key];
            a.first += 0.5 * (b.avg_l_agreement + b.avg_r_agreement), ++a.second;
            auto& k = ks[key];
            k.first += b.pl_ks, ++k.second;
        }
    }
    std::vector<HeadStats> out;
    for (auto& [key, s] : stats) {
        s.agreement = agree[key].first / agree[key].second;
        s.pl_ks = ks[key].first / ks[key].second;
        out.push_back(s);
    }
    return out;
}

namespace {

// The noise floor's verdict for one model (robust_z): when no head stands out, its ranking orders
// noise, and the user is told so beside the tables.
void note_uniform_update(const std::string& model, const NoiseFloor& floor,
                         std::vector<std::string>& findings) {
    const auto largest = uniform_update(floor);
    if (!largest) return;
    findings.push_back(fmt::format(
        "{}: no head's update stands out from the others' (largest robust z {:.2f}; none above {} at {}x the "
        "median relative update or more, none >= {}x the median: as uniform noise or a quantisation error "
        "is): its importance ranking orders noise (docs/compare.md)",
        model, *largest, kStandsOutZ, kStandsOutMinRatio, kStandsOutRatio));
}

}  // namespace

std::optional<double> uniform_update(const NoiseFloor& floor) {
    if (floor.z.empty() ||
        std::any_of(floor.stands_out.begin(), floor.stands_out.end(), [](char c) { return c; }))
        return std::nullopt;
    double largest = -std::numeric_limits<double>::infinity();
    for (double v : floor.z)
        if (!std::isnan(v)) largest = std::max(largest, v);
    return largest;
}

std::vector<HeadRow> rank_model_heads(const std::vector<ModelHeadBlocks>& models, int reference,
                                      const model::HeadGeometry& g, const HeadRankOptions& options,
                                      std::vector<std::string>& findings) {
    std::vector<HeadStats> ref_stats;
    if (reference >= 0) ref_stats = head_stats_of(models[static_cast<std::size_t>(reference)].blocks, g);
    std::map<std::pair<int, int>, const HeadStats*> ref_of;
    for (const auto& r : ref_stats) ref_of[{r.layer, r.head}] = &r;
    std::vector<HeadRow> rows;
    for (std::size_t m = 0; m < models.size(); ++m) {
        if (static_cast<int>(m) == reference) continue;
        const auto dom = head_stats_of(models[m].blocks, g);
        std::vector<double> relative;
        for (const auto& s : dom) relative.push_back(s.relative_update());
        const auto floor = noise_floor(relative);
        note_uniform_update(models[m].model, floor, findings);
        const auto ranked = rank_heads(dom, reference >= 0 ? &ref_stats : nullptr, options);
        for (std::size_t i = 0; i < dom.size(); ++i) {
            HeadRow row;
            row.model = models[m].model;
            row.reference = reference >= 0 ? models[static_cast<std::size_t>(reference)].model : "";
            row.layer = dom[i].layer, row.head = dom[i].head;
            row.kv_head = g.kv_head_of(dom[i].head), row.kv_group_size = g.group_size();
            row.domain = dom[i];
            if (auto it = ref_of.find({dom[i].layer, dom[i].head}); it != ref_of.end()) row.ref = *it->second;
            row.ranked = ranked[i];
            row.update_z = floor.z[i];
            row.stands_out = floor.stands_out[i] != 0;
            rows.push_back(row);
        }
    }
    return rows;
}

}  // namespace diffract::analysis
