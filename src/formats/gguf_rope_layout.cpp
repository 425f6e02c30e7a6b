// llama.cpp's RoPE row layout of Q and K in GGUF files, undone on read (TensorInfo::rope_head_rows).
//
// convert_hf_to_gguf.py (LlamaModel.permute, used by the classes that keep undo_permute = True) writes
// the rows of each head of q_proj/k_proj (weights and biases) as
//     w.reshape(n_head, 2, rows_per_head / 2, ...).swapaxes(1, 2).reshape(w.shape)
// with n_head = head_count for Q and head_count_kv for K, so that ggml's "normal" RoPE, which rotates
// adjacent pairs, computes what Hugging Face's rotate_half computes on the two halves of a head. The
// reader marks those tensors with the head's row count instead of copying them: every row read then
// goes through TensorInfo::stored_row and sees the Hugging Face order, head blocks included.
#include <charconv>
#include <optional>
#include <string>
#include <string_view>

#include "diffract/formats/gguf.hpp"

namespace diffract::formats {
namespace {

// The head count under `key` for `layer`: a positive integer, or the layer's element of a per-layer
// array. nullopt when absent or not a positive integer (gguf_config reports malformed geometry).
std::optional<std::int64_t> head_count(const GgufFile& f, const std::string& key, int layer) {
    const auto it = f.metadata.find(f.architecture + "." + key);
    if (it == f.metadata.end()) return std::nullopt;
    const nlohmann::json* v = &*it;
    if (v->is_array()) {
        if (layer < 0 || static_cast<std::size_t>(layer) >= v->size()) return std::nullopt;
        v = &(*v)[static_cast<std::size_t>(layer)];
    }
    if (!v->is_number_integer()) return std::nullopt;
    const auto n = v->get<std::int64_t>();
    return n > 0 ? std::optional<std::int64_t>(n) : std::nullopt;
}

// "blk.<layer>.attn_q.weight" -> (layer, true for Q / false for K); nullopt for any other tensor.
std::optional<std::pair<int, bool>> rope_tensor(std::string_view name) {
    constexpr std::string_view kPrefix = "blk.";
    if (!name.starts_with(kPrefix)) return std::nullopt;
    name.remove_prefix(kPrefix.size());
    int layer = -1;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
    if (ec != std::errc() || layer < 0) return std::nullopt;
    const std::string_view rest(end, static_cast<std::size_t>(name.data() + name.size() - end));
    if (rest == ".attn_q.weight" || rest == ".attn_q.bias") return std::pair{layer, true};
    if (rest == ".attn_k.weight" || rest == ".attn_k.bias") return std::pair{layer, false};
    return std::nullopt;
}

}  // namespace

bool gguf_rope_permuted(std::string_view architecture) {
    // general.architecture of the converter classes that call LlamaModel.permute on q/k: LlamaModel
    // (Llama, Mistral and Mixtral from HF, Llava, ...), its subclasses that keep undo_permute (Granite,
    // GraniteMoe, SmolLM3, Arcee) and MiniCPM. Not Llama 4, Apertus or Mistral's own consolidated
    // format (undo_permute = False), nor architectures with fused or per-layer-varying projections.
    for (std::string_view a : {"llama", "granite", "granitemoe", "smollm3", "arcee", "minicpm"})
        if (architecture == a) return true;
    return false;
}

void undo_gguf_rope_layout(GgufFile& f) {
    if (!gguf_rope_permuted(f.architecture)) return;
    for (auto& t : f.tensors) {
        const auto which = rope_tensor(t.name);
        if (!which || t.shape.empty() || !dtype_is_float(t.dtype)) continue;
        const auto [layer, is_q] = *which;
        const auto heads = head_count(f, "attention.head_count", layer);
        auto groups = heads;
        if (!is_q)
            if (const auto kv = head_count(f, "attention.head_count_kv", layer)) groups = kv;
        if (!groups) continue;  // no geometry: the layout cannot be undone (nor heads split)
        // Rows that do not split into heads of an even row count cannot come from the converter (its
        // reshape would fail): they stay in stored order, and head_blocks refuses the geometry.
        const std::int64_t rows = t.shape[0];
        if (rows % (2 * *groups) != 0) continue;
        if (rows / *groups > 1) t.rope_head_rows = rows / *groups;
    }
}

}  // namespace diffract::formats
