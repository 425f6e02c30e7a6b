#include "diffract/formats/packed_experts.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/names.hpp"
#include "diffract/core/quantized.hpp"

namespace diffract::formats {
namespace {

// What a packed tensor holds: the fused gate and up projections, one of them, or the down projection.
enum class Packed { gate_up, gate, up, down };

// Hugging Face's projection names (the packed tensor's suffix, and each expert's matrix as named
// here), and GGUF's packed tensors.
constexpr NameTable<Packed, 4> kHfProjNames{{{Packed::gate_up, "gate_up_proj"},
                                             {Packed::gate, "gate_proj"},
                                             {Packed::up, "up_proj"},
                                             {Packed::down, "down_proj"}}};
constexpr NameTable<Packed, 4> kGgufProjNames{{{Packed::gate_up, "ffn_gate_up_exps"},
                                               {Packed::gate, "ffn_gate_exps"},
                                               {Packed::up, "ffn_up_exps"},
                                               {Packed::down, "ffn_down_exps"}}};

struct PackedName {
    std::string owner;  // the name the experts' matrices are named under ("model.layers.0.mlp.experts")
    Packed kind;
    bool bias = false;
    bool gguf = false;
};

// Recognises "X.experts.gate_up_proj" (and _bias), ".gate_proj", ".up_proj", ".down_proj", and GGUF's
// "blk.N.ffn_{gate,up,down,gate_up}_exps.weight".
std::optional<PackedName> packed_name(const std::string& name) {
    for (const auto& [kind, proj] : kHfProjNames)
        for (const bool bias : {false, true}) {
            const std::string suffix = fmt::format(".experts.{}{}", proj, bias ? "_bias" : "");
            if (name.ends_with(suffix))
                return PackedName{name.substr(0, name.size() - suffix.size()) + ".experts", kind, bias,
                                  false};
        }
    for (const auto& [kind, proj] : kGgufProjNames) {
        const std::string suffix = fmt::format(".{}.weight", proj);
        if (name.starts_with("blk.") && name.ends_with(suffix))
            return PackedName{name.substr(0, name.size() - std::string_view(".weight").size()), kind, false,
                              true};
    }
    return std::nullopt;
}

std::string proj_name(Packed kind) { return std::string(name_of(kHfProjNames, kind)); }

const nlohmann::json* config_value(const nlohmann::json& config, const char* key) {
    if (!config.is_object()) return nullptr;
    if (auto it = config.find(key); it != config.end() && !it->is_null()) return &*it;
    if (auto t = config.find("text_config"); t != config.end() && t->is_object())
        if (auto it = t->find(key); it != t->end() && !it->is_null()) return &*it;
    return nullptr;
}

// One expert of a packed tensor stored [E, in, out] (x @ W): rows of the logical matrix are columns of
// the stored slice, from column `first` every `step`.
TensorInfo transposed_expert(std::string name, const TensorInfo& slice, std::int64_t out, std::int64_t first,
                             std::int64_t step, std::string_view layout) {
    auto q = std::make_shared<QuantizedWeight>();
    q->scheme = QuantScheme::strided;
    q->rows = out, q->cols = slice.shape[0];
    q->codes = slice;
    q->first = first, q->row_stride = step, q->col_stride = slice.shape[1];
    q->description = std::string(layout);
    return decoded_matrix(std::move(name), std::move(q));
}

// Records where `member` lies in `source` (PackedSlot): what an edit writes back through.
TensorInfo in_slot(TensorInfo member, const TensorInfo& source, std::int64_t first, std::int64_t row_stride,
                   std::int64_t col_stride, std::int64_t rows, std::int64_t cols) {
    auto slot = std::make_shared<PackedSlot>();
    slot->source = source;
    slot->source.packed.reset();
    slot->first = first, slot->row_stride = row_stride, slot->col_stride = col_stride;
    slot->rows = rows, slot->cols = cols;
    member.packed = std::move(slot);
    return member;
}

}  // namespace

namespace {

// What the config says about the packing: the architecture's orientation and the model width.
struct Packing {
    bool gpt_oss = false, llama4 = false;
    std::optional<std::int64_t> hidden;
};

// Whether a packed weight is stored x @ W ([E, in, out]): by the architecture, and by hidden_size where
// the shape decides it.
bool stored_transposed(const TensorInfo& t, const PackedName& p, const Packing& k) {
    bool transposed = !p.gguf && (k.gpt_oss || k.llama4);
    if (k.hidden && !p.gguf) {
        const std::int64_t A = t.shape[1], B = t.shape[2];
        const bool in_is_hidden = p.kind != Packed::down;
        const bool standard_fits = in_is_hidden ? B == *k.hidden : A == *k.hidden;
        const bool transposed_fits = in_is_hidden ? A == *k.hidden : B == *k.hidden;
        if (standard_fits != transposed_fits)
            transposed = transposed_fits;
        else if (!standard_fits)
            throw_input_error(
                t.path(), t.name,
                fmt::format("packed experts of shape {} have no dimension of hidden_size {} where "
                            "the {} projection takes it",
                            shape_string(t.shape), *k.hidden, proj_name(p.kind)));
    }
    if (transposed && dtype_is_block(t.dtype))
        throw_input_error(t.path(), t.name, "packed experts stored transposed in a block type are not read");
    return transposed;
}

// [E, n] biases: one 1-D bias per expert, never a matrix.
void split_biases(const TensorInfo& t, const PackedName& p, std::vector<TensorInfo>& out) {
    for (std::int64_t e = 0; e < t.shape[0]; ++e) {
        auto b = element_slice(t, e * t.shape[1], {t.shape[1]});
        b.name = fmt::format("{}.{}.{}.bias", p.owner, e, proj_name(p.kind));
        out.push_back(in_slot(std::move(b), t, e * t.shape[1], 1, 0, t.shape[1], 1));
    }
}

// One matrix per expert (gate and up apart when fused), each a view of the packed tensor in its slot.
void split_weights(const TensorInfo& t, const PackedName& p, const Packing& k, std::vector<TensorInfo>& out) {
    const std::int64_t A = t.shape[1], B = t.shape[2];
    const bool transposed = stored_transposed(t, p, k);
    const std::int64_t rows = transposed ? B : A;  // the logical matrices' output dimension
    if (p.kind == Packed::gate_up && rows % 2)
        throw_input_error(t.path(), t.name,
                          fmt::format("fused gate_up experts with an odd output dimension {}", rows));
    const std::string layout =
        transposed ? (k.gpt_oss ? "packed experts, x @ W, gate/up interleaved" : "packed experts, x @ W")
                   : "";
    auto name = [&](std::int64_t e, std::string_view proj) {
        return p.gguf ? fmt::format("{}.{}.weight", p.owner, e)
                      : fmt::format("{}.{}.{}.weight", p.owner, e, proj);
    };
    for (std::int64_t e = 0; e < t.shape[0]; ++e) {
        const std::int64_t base = e * A * B;
        const auto expert = element_slice(t, base, {A, B});
        // A logical out × in matrix from output `first` every `step`: stored rows (standard) or stored
        // columns (x @ W).
        auto member = [&](std::string member_name, std::int64_t out_rows, std::int64_t first,
                          std::int64_t step) {
            if (transposed)
                return in_slot(
                    transposed_expert(std::move(member_name), expert, out_rows, first, step, layout), t,
                    base + first, step, B, out_rows, A);
            auto m = element_slice(t, base + first * B, {out_rows, B});
            m.name = std::move(member_name);
            return in_slot(std::move(m), t, base + first * B, B, 1, out_rows, B);
        };
        if (p.kind != Packed::gate_up) {
            out.push_back(member(name(e, proj_name(p.kind)), rows, 0, 1));
            continue;
        }
        const std::int64_t half = rows / 2;
        if (transposed) {
            // gpt-oss interleaves gate and up outputs (gate_up[..., ::2], [..., 1::2]); Llama 4 chunks them.
            out.push_back(member(name(e, "gate_proj"), half, 0, k.gpt_oss ? 2 : 1));
            out.push_back(member(name(e, "up_proj"), half, k.gpt_oss ? 1 : half, k.gpt_oss ? 2 : 1));
        } else {
            out.push_back(member(p.gguf ? fmt::format("{}.{}.gate.weight", p.owner, e) : name(e, "gate_proj"),
                                 half, 0, 1));
            out.push_back(member(p.gguf ? fmt::format("{}.{}.up.weight", p.owner, e) : name(e, "up_proj"),
                                 half, half, 1));
        }
    }
}

}  // namespace

void split_packed_experts(Checkpoint& ck) {
    Packing k;
    if (const auto* m = config_value(ck.config, "model_type"); m && m->is_string()) {
        const auto model_type = m->get<std::string>();
        k.gpt_oss = model_type == "gpt_oss", k.llama4 = model_type.starts_with("llama4");
    }
    if (const auto* h = config_value(ck.config, "hidden_size"); h && h->is_number_integer())
        k.hidden = h->get<std::int64_t>();
    std::vector<TensorInfo> out;
    for (auto& t : ck.tensors) {
        const auto p = t.quant ? std::nullopt : packed_name(t.name);
        if (!p || !dtype_is_float(t.dtype) || t.shape.size() != (p->bias ? 2u : 3u)) {
            out.push_back(std::move(t));
            continue;
        }
        if (p->bias)
            split_biases(t, *p, out);
        else
            split_weights(t, *p, k, out);
        ++ck.packed_experts;
    }
    ck.tensors = std::move(out);
}

}  // namespace diffract::formats
