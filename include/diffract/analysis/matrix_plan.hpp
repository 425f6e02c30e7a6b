// The unit of work of every analysis: one matrix — a whole 2-D tensor or one head's block of an
// attention projection — with its identity (tensor, block, layer, role, head).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/selection.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/formats/checkpoint.hpp"

namespace diffract::analysis {

struct MatrixUnit {
    const TensorInfo* tensor = nullptr;
    MatrixBlock block;
    std::optional<int> layer;
    model::Role role = model::Role::other;  // for head blocks: attn_q | attn_k | attn_v | attn_o
    std::optional<int> head;                // query head (Q, O) or key/value head (K, V)
    std::optional<int> expert;              // a routed expert's index
    model::ExpertKind expert_kind = model::ExpertKind::none;
    model::Component component = model::Component::language;
    std::string block_key() const;  // "" for whole matrices, "attn_q:3" for heads
    // The block key with the block's region in stored coordinates ("attn_q:3@0+64,0+384"): what a
    // stored result depends on besides the bytes, whatever config.json says about the geometry.
    std::string store_block() const;
    double flops() const;                 // cost estimate of its SVD (for scheduling)
    std::uint64_t bytes(bool f64) const;  // working memory estimate
};

// Refuses (InputError naming the file, the tensor and the type or scheme) a checkpoint whose quantization
// scheme is not decoded, and, unless selection.allow_partial, any selected weight matrix of a type
// that is not decoded (a GGUF type, integer codes no scheme paired).
void check_decoded(const formats::Checkpoint& ck, const Selection& selection);

// The analysable matrices of a checkpoint under a selection: every selected floating tensor with
// two or more dimensions (N-D viewed as shape[0] × rest), then, with `heads`, its head blocks.
// Runs check_decoded first; with allow_partial, undecoded matrices are skipped, and when that leaves
// nothing, throws InputError naming one and its type. Integer buffers and 1-D tensors are no matrices.
std::vector<MatrixUnit> plan_matrices(const formats::Checkpoint& ck, const Selection& selection, bool heads);

// The selected matrices plan_matrices skips for their type under allow_partial (a GGUF type that is not
// decoded, a weight's integer codes), as one warning line with a count per type (empty when none): a
// partial result is never silent.
std::vector<std::string> unread_matrices(const formats::Checkpoint& ck, const Selection& selection);

}  // namespace diffract::analysis
