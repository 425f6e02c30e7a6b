// Pairing the tensors of two checkpoints that name them differently (Hugging Face and llama.cpp).
#include <string_view>

#include "diffract/formats/checkpoint.hpp"

namespace diffract::formats {
namespace {

// Which embedding a tensor is, in the Hugging Face and llama.cpp namings ("" for other tensors).
std::string_view embedding_kind(std::string_view name) {
    auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
    if (has("position_embd") || has("position_embeddings") || has("wpe.")) return "position";
    if (has("token_types") || has("token_type_embeddings")) return "token_type";
    if (has("token_embd.") || has("word_embeddings") || has("embed_tokens") || has("wte.") ||
        has("tok_embeddings"))
        return "token";
    return "";
}

}  // namespace

const TensorInfo* counterpart(const Checkpoint& ck, const Checkpoint& own, const TensorInfo& t) {
    if (const auto* same = ck.find(t.name)) return same;
    const auto role = model::classify_tensor(t.name);
    if (role.role == model::Role::other || role.role == model::Role::norm) return nullptr;
    const bool bias = t.name.ends_with("bias");
    auto unique_in = [&](const Checkpoint& c) -> const TensorInfo* {
        const TensorInfo* found = nullptr;
        for (const auto& x : c.tensors) {
            const auto r = model::classify_tensor(x.name);
            if (r.role != role.role || r.layer != role.layer || r.expert != role.expert ||
                x.name.ends_with("bias") != bias || embedding_kind(x.name) != embedding_kind(t.name))
                continue;
            if (found) return nullptr;  // ambiguous: pair by name only
            found = &x;
        }
        return found;
    };
    return unique_in(own) == &t ? unique_in(ck) : nullptr;
}

TensorPair align(const Checkpoint& ck, const Checkpoint& own, const TensorInfo& t) {
    const TensorInfo* other = counterpart(ck, own, t);
    if (!other) return {nullptr, PairIssue::missing};
    if (other->shape != t.shape) return {other, PairIssue::shape};
    if (dtype_is_float(t.dtype) && !dtype_is_float(other->dtype)) return {other, PairIssue::not_float};
    if (ck.unsupported_types.count(other->name)) return {other, PairIssue::undecoded};
    return {other, PairIssue::none};
}

}  // namespace diffract::formats
