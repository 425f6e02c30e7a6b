// Head ranking: the paper's head-importance score and the alternative orderings, as a library
// function shared by `compare` (heads.csv) and the later `edit rewind`.
//
// Importance (metrics.md, "The paper's analyses"): s = scale01(update_norm_domain) −
// scale01(update_norm_reference), scale01 a min-max scaling over a set of heads; the lowest s is the
// least important head, the first to rewind. Rank 0 = first to rewind; ties are broken by (layer, head).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/core/names.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/model/schema.hpp"

namespace diffract::analysis {

// Over which heads the min-max scaling runs.
//   global:     all heads of the model together (default)
//   layer:      the heads of each layer separately
//   projection: each block type separately (the Q norms of all heads, the K norms, ...): the score is
//               computed per projection, then averaged over the projections present
enum class ScaleScope { global, layer, projection };
// Which key ranks the heads (ascending key = rewound first).
//   importance: s above
//   agreement:  the mean vector agreement of the head's blocks with the base; the MOST agreeing
//               (least changed) head ranks lowest
//   pl_ks:      the mean power-law KS distance of the head's blocks in the domain model; the LARGEST
//               KS distance (the least heavy-tailed, worst power-law fit) ranks lowest
//   random:     a permutation seeded by `seed` (reproducible across platforms)
enum class HeadOrder { importance, agreement, pl_ks, random };

inline constexpr NameTable<ScaleScope, 3> kScaleScopeNames{
    {{ScaleScope::global, "global"}, {ScaleScope::layer, "layer"}, {ScaleScope::projection, "projection"}}};
inline constexpr NameTable<HeadOrder, 4> kHeadOrderNames{{{HeadOrder::importance, "importance"},
                                                          {HeadOrder::agreement, "agreement"},
                                                          {HeadOrder::pl_ks, "pl_ks"},
                                                          {HeadOrder::random, "random"}}};

// heads.csv's computed columns, for `diffract metrics --table heads` (the identity columns model,
// reference, layer, head, kv_head, kv_group_size and the ranking's options are not listed).
struct HeadField {
    std::string_view name, formula;
};
const std::vector<HeadField>& head_fields();

std::string_view scale_scope_name(ScaleScope s);
std::string_view head_order_name(HeadOrder o);
// Parse the option values; throw InputError naming the flag.
ScaleScope parse_scale_scope(std::string_view text);
HeadOrder parse_head_order(std::string_view text,
                           std::string_view flag = "--order");  // flag: named in errors

inline constexpr int kProjections = 4;  // Q, K, V, O

// One head of one model. Block norms are ‖W − W_base‖_F of the head's Q, K, V and O blocks (NaN for a
// block that was not compared). With GQA a shared K/V block appears in every query head of its group.
struct HeadStats {
    int layer = 0, head = 0;
    double block_norm[kProjections];       // q, k, v, o
    double base_block_norm[kProjections];  // ‖W_base‖_F of the same blocks (NaN when unknown)
    double agreement;                      // NaN when unknown
    double pl_ks;                          // NaN when unknown
    HeadStats();
    // sqrt of the sum of the squared block norms that are not NaN (NaN when none is).
    double update_norm() const;
    // update_norm / ‖W_base‖_F over the same blocks: the update as a share of the head's weights,
    // comparable across layers of different scales (NaN when unknown).
    double relative_update() const;
};

// One compared head block of one model (compare's head rows): Q and O blocks are a query head's,
// K and V blocks a key/value head's.
struct HeadBlock {
    int layer = 0;
    model::Role role = model::Role::other;  // attn_q | attn_k | attn_v | attn_o
    int head = 0;
    double delta_frob_norm = 0, avg_l_agreement = 0, avg_r_agreement = 0, pl_ks = 0;
    double rel_delta_frob_norm = 0;  // delta_frob_norm / ‖W_base block‖_F
};

// The noise floor of the importance ranking: which heads' updates stand out from the others'. Two
// tests on each head's relative_update r among all heads of the model, either one enough:
//   - spread: the modified z-score of Iglewicz and Hoaglin (1993), 0.6745 (r − median r) / MAD(r),
//     above kStandsOutZ, their recommended outlier bound (MAD 0: 0 at the median, +inf above it), for
//     an update at least kStandsOutMinRatio × median r: a uniform update's relative sizes can be so
//     tight that a head 5 % above the median has z 3.9 (an int8 copy of a trained decoder: relative
//     updates 0.00509 .. 0.00540), a statistical outlier of no practical size;
//   - scale: r at least kStandsOutRatio × median r. When many heads changed (a quarter planted and a
//     quarter drifting in the synthetic family) they inflate the MAD and hide each other from the
//     spread test (largest z 3.25 there), but their updates are 5.4× the median head's.
// A uniform update (noise, a quantisation error: largest z 2.2 and 1.01× the median on the family's
// Q8_0-style copy) has no head standing out, so its 0..1 importance ranking orders noise.
inline constexpr double kStandsOutZ = 3.5;
inline constexpr double kStandsOutMinRatio = 1.25;
inline constexpr double kStandsOutRatio = 2.0;
std::vector<double> robust_z(const std::vector<double>& values);
struct NoiseFloor {
    std::vector<double> z;         // robust_z of each relative update
    std::vector<char> stands_out;  // either test
    double median = 0;             // of the finite relative updates
};
NoiseFloor noise_floor(const std::vector<double>& relative_updates);
// When no unit stands out (and there are some): the largest robust z, for the finding that the ranking
// orders noise; nullopt when some unit stands out.
std::optional<double> uniform_update(const NoiseFloor& floor);

// Per query head, in (layer, head) order: its Q, K, V, O block norms (GQA: a K/V block counts in every
// query head of its group), agreement the mean of 0.5 (l + r) over its blocks, pl_ks their mean.
// Blocks of other roles are ignored.
std::vector<HeadStats> head_stats_of(const std::vector<HeadBlock>& blocks,
                                     const model::HeadGeometry& geometry);

struct HeadRankOptions {
    ScaleScope scope = ScaleScope::global;
    HeadOrder order = HeadOrder::importance;
    std::uint64_t seed = 42;
};

// --order, --scale-scope and --seed as the ranking's options (InputError naming the flag).
HeadRankOptions parse_head_rank_options(std::string_view order, std::string_view scale_scope,
                                        std::uint64_t seed);

struct RankedHead {
    int layer = 0, head = 0;
    double update_norm = 0;
    double ref_update_norm = kNaN;  // NaN without a reference
    double importance = kNaN;       // s; without a reference, scale01(update_norm)
    double key = kNaN;              // the value the order sorts by (ascending)
    int rank = 0;                   // 0 = first to rewind
};

// Min-max scaling to [0, 1] over the finite values (NaN stays NaN); all 0 when max == min.
std::vector<double> scale01(const std::vector<double>& values);

// Ranks `domain`'s heads. `reference` (may be null) is matched by (layer, head); a head missing
// there counts as NaN. NaN keys sort after every finite key. The result is in the order of `domain`.
std::vector<RankedHead> rank_heads(const std::vector<HeadStats>& domain,
                                   const std::vector<HeadStats>* reference, const HeadRankOptions& options);

// One head of one model as compare reports it (heads.csv): its block norms against the base, the
// reference's, and its rank.
struct HeadRow {
    std::string model, reference;
    int layer = 0, head = 0, kv_head = 0, kv_group_size = 1;
    HeadStats domain, ref;  // ref: NaN norms without a reference
    RankedHead ranked;
    double update_z = kNaN;   // robust_z among the model's heads
    bool stands_out = false;  // noise_floor's verdict
};

// One model's compared head blocks, as compare computed them.
struct ModelHeadBlocks {
    std::string model;
    std::vector<HeadBlock> blocks;
};

// compare's head table: every model's heads, model by model, each with its statistics (head_stats_of),
// the reference's, its rank (rank_heads) and the noise floor's verdict (noise_floor). The model at
// `reference` (-1: none) is ranked against and not ranked itself. `findings` gets a line for each model
// no head of which stands out: its ranking orders noise.
std::vector<HeadRow> rank_model_heads(const std::vector<ModelHeadBlocks>& models, int reference,
                                      const model::HeadGeometry& geometry, const HeadRankOptions& options,
                                      std::vector<std::string>& findings);

}  // namespace diffract::analysis
