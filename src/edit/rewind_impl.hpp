// Rewind's head bookkeeping, shared by the checkpoint rewind (rewind.cpp) and the adapter rewind
// (rewind_adapter.cpp).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "diffract/edit/edit.hpp"

namespace diffract::edit::detail {

// Per layer: the query heads rewound and the kv heads whose K/V blocks are rewound.
struct HeadSet {
    std::map<int, std::set<int>> q, kv;
    bool has_q(int layer, int head) const {
        auto it = q.find(layer);
        return it != q.end() && it->second.count(head);
    }
    bool has_kv(int layer, int head) const {
        auto it = kv.find(layer);
        return it != kv.end() && it->second.count(head);
    }
    // Whether a head block of `layer` (Q/K/V/O weight block, Q/K/V bias slice) is rewound.
    bool rewinds(int layer, const model::HeadBlock& hb) const {
        const bool kv_block = hb.proj == model::Role::attn_k || hb.proj == model::Role::attn_v;
        return kv_block ? has_kv(layer, hb.head) : has_q(layer, hb.head);
    }
    // Whether a bias slice of `layer` takes the base's values: the Q/K/V slices of rewound heads, and
    // the whole O bias with --o-bias base when the layer has a rewound head (roles outside the selection
    // are left alone).
    bool rewinds_bias(int layer, const model::HeadBlock& hb, OBias o_bias,
                      const analysis::Selection& sel) const {
        if (!sel.selects_role(hb.proj)) return false;
        if (hb.proj == model::Role::attn_o) return o_bias == OBias::base && q.count(layer) > 0;
        return rewinds(layer, hb);
    }
};

HeadSet head_set(const std::vector<RewindHead>& heads, const model::ModelSchema& schema, KvPolicy kv,
                 const std::string& path);

// A bias's slice for a head is its weight block's output rows: rows of a stored [out, in] weight, or
// columns of a transposed (Conv1D, [in, out]) one; fused and interleaved QKV layouts follow from the
// weight's head blocks. The O bias has no per-head slice: `take` decides for the whole of it.
// Copies the slices `take` selects from `pre` into `out` (which holds `cpt`'s bytes).
void rewind_bias(const TensorInfo& cpt, const TensorInfo& pre, const formats::Checkpoint& model,
                 model::Role role, const std::function<bool(const model::HeadBlock&)>& take,
                 std::span<std::byte> out);

// Whether the bias `bias_name` (of a layer's attention projection) holds a slice that the rewind gives
// the base's values: some head block of its weight whose bias rewinds (HeadSet::rewinds_bias).
bool any_bias_rewound(const formats::Checkpoint& model, const std::string& bias_name,
                      const model::TensorRole& role, const HeadSet& set, OBias o_bias,
                      const analysis::Selection& selection);

// A rewind copies the base's bytes: `pre` (the base's tensor) must have the model's `cpt` dtype
// (InputError naming the base's file and tensor otherwise).
void require_same_dtype(const TensorInfo& pre, const TensorInfo& cpt);

// The "parameters" of a rewind's diffract_edit.json (the full checkpoint's and the adapter's alike).
nlohmann::json rewind_parameters(const std::vector<RewindHead>& heads, KvPolicy kv, OBias o_bias);

}  // namespace diffract::edit::detail
