// Expert importance: the paper's head-importance analysis with the experts of a mixture-of-experts
// layer as the units (compare's experts.csv). An expert's "blocks" are its gate, up and down matrices
// (a fused gate_up counts as gate); its update norm, relative update, importance against a reference,
// ordering and noise floor are the heads' (head_ranking.hpp), computed over the model's routed experts,
// and apart over its shared experts. Router drift sits beside each routed expert: how far its router
// row moved between the base and the model.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/head_ranking.hpp"

namespace diffract::analysis {

// One compared expert matrix of one model.
struct ExpertMatrix {
    int layer = 0;
    std::optional<int> expert;  // a routed expert's index; none for a shared expert
    model::ExpertKind kind = model::ExpertKind::routed;
    model::Role role = model::Role::mlp_gate;  // mlp_gate | mlp_up | mlp_down | mlp_gate_up
    double delta_frob_norm = 0, rel_delta_frob_norm = 0, avg_l_agreement = 0, avg_r_agreement = 0, pl_ks = 0;
};

// One routed expert's router row, base against model: ‖r − r_base‖ and the angle between them (degrees).
struct RouterRow {
    int layer = 0, expert = 0;
    double update_norm = std::numeric_limits<double>::quiet_NaN();
    double angle = std::numeric_limits<double>::quiet_NaN();
};

struct ModelExperts {
    std::string model;
    std::vector<ExpertMatrix> matrices;
    std::vector<RouterRow> router;
};

// experts.csv's block columns, in HeadStats::block_norm order.
inline constexpr const char* kExpertBlocks[] = {"gate", "up", "down"};

struct ExpertRow {
    std::string model, reference;
    int layer = 0;
    std::optional<int> expert;
    model::ExpertKind kind = model::ExpertKind::routed;
    HeadStats domain, ref;  // block_norm[0..2]: gate, up, down; ref: NaN without a reference
    RankedHead ranked;      // ranked among the model's experts of the same kind
    double update_z = std::numeric_limits<double>::quiet_NaN();
    bool stands_out = false;
    RouterRow router;  // NaN for a shared expert or without a router
};

// A routed expert as a rewind unit with the heads' row (its index in `head`, a K/V group of its own):
// what the rewind sweeps rank and draw from.
HeadRow unit_row(const ExpertRow& e);

// Every model's experts (the one at `reference`, -1 for none, is ranked against, not ranked), routed and
// shared apart. `findings` gets a line for each model none of whose routed experts stands out.
std::vector<ExpertRow> rank_model_experts(const std::vector<ModelExperts>& models, int reference,
                                          const HeadRankOptions& options, std::vector<std::string>& findings);

// Router drift of one layer: rows of the base's and the model's router (experts × hidden), row-major.
std::vector<RouterRow> router_drift(int layer, const std::vector<double>& base,
                                    const std::vector<double>& model, std::int64_t experts,
                                    std::int64_t hidden);

}  // namespace diffract::analysis
