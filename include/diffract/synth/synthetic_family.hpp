// A deterministic synthetic model family with planted structure: the test backbone.
//
// It writes OLMo-2-shaped HF model directories (config.json + safetensors, optionally sharded,
// optionally GQA): a pre-trained checkpoint and one continual-pre-training (CPT) checkpoint per
// domain plus a reference domain, with answers known exactly and recorded in planted.json:
//   - every CPT model = pre-trained + its own tiny noise (relative size `noise`);
//   - generic drift: a set of "generic" heads gets the same update (relative size `generic_scale`)
//     in every CPT model, the reference included;
//   - domain heads: in each domain (not the reference) a disjoint set of heads is rotated,
//     W_h -> L W_h R with L, R orthogonal: the head's spectrum is preserved exactly (before bf16
//     rounding) while its singular vectors rotate; its update is large (about sqrt(2) ||W_h||).
//   - MLP matrices of the pre-trained model carry `spikes` planted rank-one outliers above the MP
//     bulk edge.
// So head importance s = scale01(domain update) - scale01(reference update) is highest on the domain
// heads and lowest on the generic heads; agreement is low exactly on the domain heads' blocks.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "diffract/core/dtype.hpp"

namespace diffract::synth {

struct FamilyOptions {
    int layers = 4;
    int hidden = 256;
    int heads = 8;
    int kv_heads = 0;  // < heads for GQA; 0: same as heads
    int intermediate = 512;
    int vocab = 1024;
    std::vector<std::string> domains = {"math", "code"};
    std::string reference = "text";
    int domain_heads_per_layer = 2;  // per domain
    int generic_heads_per_layer = 2;
    double generic_scale = 0.5;  // ||generic update|| / ||W_h||
    double noise = 0.02;         // ||noise|| / ||W|| for every matrix of every CPT model
    int spikes = 3;
    DType dtype = DType::BF16;
    std::uint64_t max_shard_bytes = 0;  // 0: one file per model
    std::uint64_t seed = 0;
    std::vector<std::string> only;  // write only these models (e.g. {"pretrained"}); empty: all
};

// Writes DIR/pretrained, DIR/<domain>..., DIR/<reference> and DIR/planted.json.
void generate_family(const std::string& out_dir, const FamilyOptions& options);

// A preset's shapes ("tiny": the defaults above; "1b", "7b": OLMo-2's) set on `o`, except the shape
// fields named in `given` (layers, hidden, heads, kv_heads, intermediate, vocab): `--preset 7b
// --layers 2` is the 7B's matrices in two blocks, not a value silently dropped. `heads` given without
// `kv_heads` keeps full attention. Throws InputError naming --preset for another name.
void apply_preset(FamilyOptions& o, const std::string& preset, const std::set<std::string>& given);

// --shard-mb as the byte size of FamilyOptions::max_shard_bytes: a finite number of MB >= 0 (0: one
// file per model), else InputError naming --shard-mb.
std::uint64_t family_shard_bytes(double shard_mb);

// The storage dtype of a family: BF16, F16 or F32 (InputError naming --dtype otherwise).
DType parse_family_dtype(const std::string& text);

}  // namespace diffract::synth
