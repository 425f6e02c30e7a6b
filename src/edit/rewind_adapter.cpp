// Head rewind written as a LoRA adapter: the adapter of a BASE+ADAPTER model with the factor rows
// (or columns) of the rewound heads zeroed, so that the merged model has the base's values there.
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/formats/checkpoint_writer.hpp"
#include "diffract/formats/lora_adapter.hpp"
#include "nonfinite_guard_impl.hpp"
#include "rewind_impl.hpp"

namespace diffract::edit {
namespace {

// Which factor entries to zero for a rewound block of the stored weight [R, C]. The delta is B·A
// ([R, C]), or (B·A)ᵀ when transposed: B's rows index the stored rows (transposed: columns), A's
// columns the stored columns (transposed: rows). A block spanning every stored column is a row range
// (Q/K/V of an [out, in] weight); one spanning every stored row is a column range (O).
struct Zeroing {
    std::vector<std::pair<std::int64_t, std::int64_t>> b_rows, a_cols;  // [first, first + count)
};

void add_block(Zeroing& z, const MatrixBlock& b, std::int64_t R, std::int64_t C, bool transposed,
               const std::string& path, const std::string& tensor) {
    const bool row_range = b.col0 == 0 && b.cols == C;
    const bool col_range = b.row0 == 0 && b.rows == R;
    if (!row_range && !col_range)
        throw_input_error(path, tensor,
                          "a head block that is neither whole rows nor whole columns has no LoRA form");
    if (row_range)
        (transposed ? z.a_cols : z.b_rows).push_back({b.row0, b.rows});
    else
        (transposed ? z.b_rows : z.a_cols).push_back({b.col0, b.cols});
}

// Factor tensor name -> what to zero in it (and whether it is a B factor): the rewound head blocks of
// every attention module of the adapter. NaN/Inf in the factors, or a merge that overflows (a huge
// lora_alpha), is refused unless --allow-nonfinite, as the full rewind does: the merged tensor is what a
// loader would compute.
std::map<std::string, std::pair<Zeroing, bool>> plan_factor_edits(const formats::LoraAdapter& adapter,
                                                                  const formats::Checkpoint& model,
                                                                  const detail::HeadSet& set,
                                                                  const EditCommon& common) {
    std::map<std::string, std::pair<Zeroing, bool>> edits;
    for (const auto& m : adapter.modules) {
        const TensorInfo* w = model.find(m.target);
        const auto role = model::classify_tensor(m.target);
        if (!w || !role.layer || !model::role_is_attention(role.role)) continue;
        nonfinite_mask(m.a, {}, common.allow_nonfinite);
        nonfinite_mask(m.b, {}, common.allow_nonfinite);
        nonfinite_mask(*w, {}, common.allow_nonfinite);
        Zeroing z;
        for (const auto& hb : model::head_blocks(model.schema, *w, role.role)) {
            if (!common.selection.selects_role(hb.proj) || !set.rewinds(*role.layer, hb)) continue;
            add_block(z, hb.block, w->shape[0], w->shape[1], m.transposed, model.adapter, m.target);
        }
        // A factor with nothing to zero (no rewound head, or only B's rows for a Q/K/V module) stays as
        // stored.
        if (!z.a_cols.empty()) edits[m.a.name] = {z, false};
        if (!z.b_rows.empty()) edits[m.b.name] = {std::move(z), true};
    }
    return edits;
}

// Zeroes a factor's rows (B) or columns (A) in its output bytes.
void zero_factor(const TensorInfo& t, const Zeroing& zero, bool is_b, std::span<std::byte> out) {
    const auto es = static_cast<std::int64_t>(dtype_size(t.dtype));
    const std::int64_t cols = t.shape[1];
    if (is_b) {
        for (const auto& [first, count] : zero.b_rows)
            std::memset(out.data() + first * cols * es, 0, static_cast<std::size_t>(count * cols * es));
        return;
    }
    for (std::int64_t r = 0; r < t.shape[0]; ++r)
        for (const auto& [first, count] : zero.a_cols)
            std::memset(out.data() + (r * cols + first) * es, 0, static_cast<std::size_t>(count * es));
}

// The adapter directory: every file of the input adapter carried, its weights replaced, the rewound
// heads' table and the provenance (the adapter and its base).
formats::WriteOptions adapter_options(const formats::Checkpoint& base, const formats::Checkpoint& model,
                                      const std::vector<RewindHead>& heads, KvPolicy kv, OBias o_bias,
                                      EditSummary& summary) {
    formats::WriteOptions options;
    options.max_shard_bytes = UINT64_MAX;
    options.weights_file = "adapter_model.safetensors";
    options.copy_files_from = model.adapter;
    options.replaced_weight_files = {"adapter_model.safetensors"};
    options.inputs = formats::input_paths({&base, &model});
    options.extra_files["rewound_heads.csv"] = rewound_heads_csv(heads, model, kv, o_bias);
    nlohmann::json inputs = nlohmann::json::array();
    inputs.push_back({{"name", model.name}, {"path", model.adapter}, {"role", "adapter"}});
    inputs.push_back({{"name", base.name}, {"path", base.path}, {"role", "base"}});
    auto parameters = detail::rewind_parameters(heads, kv, o_bias);
    parameters["as_lora"] = true;
    options.provenance = {
        {"tool", "diffract"}, {"edit", "rewind"}, {"parameters", parameters}, {"inputs", inputs}};
    // The counts are known once the tensors are written (a factor is rewritten only where a head is).
    options.complete_provenance = [&summary](nlohmann::json& p) {
        p["tensors_edited"] = summary.edited;
        p["tensors_changed"] = summary.changed;
        p["tensors_copied"] = summary.copied;
    };
    return options;
}

}  // namespace

EditSummary rewind_adapter(const std::string& out_dir, const formats::Checkpoint& base,
                           const formats::Checkpoint& model, const std::vector<RewindHead>& heads,
                           KvPolicy kv, const EditCommon& common, OBias o_bias) {
    if (model.adapter.empty())
        throw_input_error(model.path, "",
                          "rewind --as-lora: the model is not BASE+ADAPTER (no LoRA adapter)");
    check_heads(heads, model, common.selection);
    const auto set = detail::head_set(heads, model.schema, kv, model.path);
    const auto adapter = formats::open_lora_adapter(model.adapter, base);
    const auto factor_edits = plan_factor_edits(adapter, model, set, common);
    std::map<std::string, const TensorInfo*> replacement_of;
    for (const auto& r : adapter.replacements) replacement_of[r.key] = &r.tensor;
    std::vector<formats::TensorSpec> specs;
    std::map<std::string, const TensorInfo*> source_by_name;
    for (const auto& t : adapter.files) {
        specs.push_back({t.name, t.dtype, t.shape});
        source_by_name[t.name] = &t;
    }
    EditSummary summary;
    // A rewritten tensor counts as edited, and as changed when its bytes differ from the adapter's.
    auto rewritten = [&summary](const TensorInfo& t, std::span<const std::byte> out) {
        ++summary.edited;
        if (std::memcmp(out.data(), t.bytes().data(), out.size()) != 0) ++summary.changed;
    };
    formats::write_checkpoint(
        out_dir, specs,
        [&](const formats::TensorSpec& spec, std::span<std::byte> out) {
            const TensorInfo& t = *source_by_name.at(spec.name);
            std::memcpy(out.data(), t.bytes().data(), out.size());
            if (const auto f = factor_edits.find(t.name); f != factor_edits.end()) {
                zero_factor(t, f->second.first, f->second.second, out);
                return rewritten(t, out);
            }
            // A trained Q/K/V bias of the adapter takes the base's slices of the rewound heads.
            if (const auto r = replacement_of.find(t.name); r != replacement_of.end()) {
                const auto role = model::classify_tensor(r->second->name);
                const TensorInfo* pre = base.find(r->second->name);
                if (t.shape.size() == 1 && role.layer && model::role_is_attention(role.role) && pre &&
                    detail::any_bias_rewound(model, r->second->name, role, set, o_bias, common.selection)) {
                    if (pre->dtype != t.dtype)
                        throw_input_error(t.path(), t.name,
                                          fmt::format("dtype differs from the base's (expected {}, found {})",
                                                      dtype_name(pre->dtype), dtype_name(t.dtype)));
                    const int layer = *role.layer;
                    detail::rewind_bias(
                        *r->second, *pre, model, role.role,
                        [&](const model::HeadBlock& hb) {
                            return set.rewinds_bias(layer, hb, o_bias, common.selection);
                        },
                        out);
                    return rewritten(t, out);
                }
            }
            ++summary.copied;
        },
        adapter_options(base, model, heads, kv, o_bias, summary));
    return summary;
}

}  // namespace diffract::edit
