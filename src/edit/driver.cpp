// The shared "edit a checkpoint tensor by tensor" driver, value coding and grids.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/core/plain_view.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/core/quantized.hpp"
#include "diffract/core/split_list.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/formats/checkpoint_writer.hpp"
#include "diffract/formats/gguf_writer.hpp"
#include "nonfinite_guard_impl.hpp"

namespace diffract::edit {
namespace {

bool is_editable(const TensorInfo& t, const model::TensorRole& role, const model::ModelSchema& schema,
                 Editable kind) {
    const bool floating = dtype_is_float(t.dtype);  // block-quantised GGUF tensors included (plain_view)
    switch (kind) {
        case Editable::none:
            return false;
        case Editable::any_float:
            return floating;
        case Editable::matrices:
            return floating && t.shape.size() >= 2;
        case Editable::attention_heads:
            // Attention weights, and their biases (a rewound head takes its bias slice too).
            return floating && schema.heads && model::role_is_attention(role.role) &&
                   (t.shape.size() == 2 || (t.shape.size() == 1 && t.name.ends_with("bias")));
    }
    return false;
}

// The tensor of `ck` that `t` of the primary pairs with (formats::align), refused when its shape
// differs or it is not floating where `t` is. An undecoded type is left to the read, which names it.
const TensorInfo& aligned_tensor(const formats::Checkpoint& ck, const formats::TensorPair& pair,
                                 const TensorInfo& t, const formats::Checkpoint& primary) {
    const TensorInfo& other = *pair.other;
    if (pair.issue == formats::PairIssue::shape)
        throw_input_error(ck.path, other.name,
                          fmt::format("shape differs from {}'s {} (expected {}, found {})", primary.path,
                                      t.name, shape_string(t.shape), shape_string(other.shape)));
    if (pair.issue == formats::PairIssue::not_float)
        throw_input_error(ck.path, other.name,
                          fmt::format("not a floating tensor (found {})", dtype_name(other.dtype)));
    return other;
}

// The tensors an edit reads, as plain values in logical row order (core/plain_view.hpp): GGUF
// tensors dequantised and out of the RoPE layout, computed when read and released with the views.
struct PlainViews {
    TensorInfo tensor;
    std::vector<TensorInfo> inputs;
    std::vector<const TensorInfo*> input_pointers;
    PlainViews(const TensorInfo& t, const std::vector<const TensorInfo*>& in) : tensor(plain_view(t)) {
        for (const auto* i : in) inputs.push_back(plain_view(*i));
        for (const auto& i : inputs) input_pointers.push_back(&i);
    }
};

// The GGUF file of a GGUF checkpoint (its path, or the one .gguf of its directory).
std::string gguf_file_of(const formats::Checkpoint& ck) {
    if (ck.tensors.empty()) throw_input_error(ck.path, "", "the GGUF file holds no tensors to edit");
    return ck.tensors.front().path();
}

// diffract_edit.json: the edit, its parameters, its inputs (the primary first: the output's layout,
// untouched tensors and carried files come from it), what was edited, and the primary's own record
// when it was itself made by an edit.
nlohmann::json provenance(const EditJob& job, const EditSummary& summary) {
    // A BASE+ADAPTER input names its adapter beside the base's path (the path alone would say the base).
    auto input = [](const formats::Checkpoint& ck, const char* role) {
        nlohmann::json j{{"name", ck.name}, {"path", ck.path}, {"role", role}};
        if (!ck.adapter.empty()) j["adapter"] = ck.adapter, j["base"] = ck.path;
        return j;
    };
    nlohmann::json inputs = nlohmann::json::array();
    inputs.push_back(input(*job.primary, "primary"));
    for (const auto* ck : job.aligned) inputs.push_back(input(*ck, "aligned"));
    nlohmann::json p{
        {"tool", "diffract"},
        {"edit", job.record.edit},
        {"parameters", job.record.parameters.is_null() ? nlohmann::json::object() : job.record.parameters},
        {"per_head", job.common.per_head},
        {"allow_nonfinite", job.common.allow_nonfinite},
        {"inputs", inputs},
        {"tensors_edited", summary.edited},
        {"tensors_copied", summary.copied},
        {"only_in_primary", summary.only_in_primary},
        {"only_in_other", summary.only_in_other}};
    // The primary's own provenance: in its directory, or beside it when it is a single file (an edit of
    // a GGUF writes DIR/NAME.gguf with DIR/diffract_edit.json).
    auto dir = job.primary->directory();
    if (dir.empty() && !job.primary->path.empty())
        dir = std::filesystem::path(job.primary->path).parent_path().string();
    if (!dir.empty()) {
        const auto file = std::filesystem::path(dir) / formats::kProvenanceFile;
        std::ifstream in(file, std::ios::binary);
        if (in) {
            const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            const auto earlier = parse_json_bounded(text, file.string());
            if (!earlier.is_discarded()) p["input_provenance"] = earlier;
        }
    }
    return p;
}

// Each tensor's role and whether the selection takes it (a regex search), once for every stage.
struct Selected {
    std::vector<model::TensorRole> roles;
    std::vector<char> chosen;
};

Selected select_tensors(const EditJob& job) {
    const auto& primary = *job.primary;
    Selected s;
    bool any = false;
    for (const auto& t : primary.tensors) {
        s.roles.push_back(model::classify_tensor(t.name));
        s.chosen.push_back(job.common.selection.selects(t.name, s.roles.back()));
        any = any || (s.chosen.back() && is_editable(t, s.roles.back(), primary.schema, Editable::any_float));
    }
    if (!any)
        analysis::throw_nothing_selected(primary.path, job.common.selection,
                                         "no floating-point tensor to edit");
    return s;
}

// The plan: each primary tensor's output spec and, for a tensor the edit rewrites, what it reads.
struct EditPlan {
    std::vector<formats::TensorSpec> specs;
    std::vector<std::optional<EditTensor>> tensors;  // empty: copied as stored
    EditSummary summary;
    std::size_t shared = 0;      // selected floating tensors that every input holds
    std::size_t candidates = 0;  // tensors the edit may rewrite (before EditJob::touches)
};

// Plans one tensor: its pairs in the aligned inputs (looked up once; a tensor not in every input is
// carried from the primary as it is, EditSummary's rule), whether it is rewritten, and the checks
// that come before anything is written.
void plan_tensor(const EditJob& job, const TensorInfo& t, const model::TensorRole& role, bool selected,
                 EditPlan& plan) {
    const auto& primary = *job.primary;
    std::vector<formats::TensorPair> pairs;
    for (const auto* ck : job.aligned) pairs.push_back(formats::align(*ck, primary, t));
    const bool in_all = std::all_of(pairs.begin(), pairs.end(),
                                    [](const auto& p) { return p.issue != formats::PairIssue::missing; });
    if (!in_all) plan.summary.only_in_primary.push_back(t.name);
    const bool floating = is_editable(t, role, primary.schema, Editable::any_float);
    if (selected && in_all && floating) ++plan.shared;
    EditTensor e{&t, {}, role, &primary.schema};
    const bool candidate =
        in_all && job.edit && selected && is_editable(t, role, primary.schema, job.editable);
    // Aligned inputs must hold the tensors the edit may rewrite (with Editable::none: every tensor) alike.
    if (in_all && (candidate || job.editable == Editable::none))
        for (std::size_t k = 0; k < pairs.size(); ++k)
            e.inputs.push_back(&aligned_tensor(*job.aligned[k], pairs[k], t, primary));
    plan.candidates += candidate;
    // A tensor the edit leaves as it is (job.touches) is copied as stored, a GGUF tensor in its own type.
    const bool edited = candidate && (!job.touches || job.touches(e));
    // An edited tensor is written as its plain view's dtype (a quantised GGUF tensor as F32).
    plan.specs.push_back({t.name, edited && !is_plain(t) ? plain_view(t).dtype : t.dtype, t.shape});
    if (edited) {
        plan.tensors.emplace_back(std::move(e));
        ++plan.summary.edited;
        return;
    }
    // Copied, yet checked for NaN/Inf where an edit would have read it: interpolation's endpoints,
    // and a tensor not in every input.
    if ((job.editable == Editable::none || !in_all) && selected && floating) {
        const PlainViews views(t, e.inputs);
        nonfinite_mask(views.tensor, views.input_pointers, job.common.allow_nonfinite);
    }
    plan.tensors.emplace_back();
    ++plan.summary.copied;
}

// An edit that edits nothing is refused, never an unedited copy reported as a success (an
// interpolation or merge with a model whose header is empty lost the other model's changes).
void refuse_empty_edit(const EditJob& job, const EditPlan& plan) {
    const auto& primary = *job.primary;
    if (!job.aligned.empty() && plan.shared == 0)
        throw_input_error(
            primary.path, "",
            fmt::format("no selected floating-point tensor is in every input ({} holds none of "
                        "this model's, e.g. '{}'): nothing would be edited",
                        job.aligned.front()->path,
                        plan.summary.only_in_primary.empty() ? "" : plan.summary.only_in_primary.front()));
    // Counted before `touches`: a job that may rewrite tensors but leaves them all as they are (a rewind
    // of no head) writes an honest copy; one with nothing it could rewrite is refused.
    if (job.edit && job.editable != Editable::none && plan.candidates == 0)
        throw_input_error(primary.path, "", fmt::format("nothing to edit: no selected tensor is {}", [&] {
                              switch (job.editable) {
                                  case Editable::matrices:
                                      return "a floating-point matrix (two or more dimensions)";
                                  case Editable::attention_heads:
                                      return "an attention projection whose heads are known";
                                  default:
                                      return "a floating-point tensor in every input";
                              }
                          }()));
}

// Edits write the primary's layout, its untouched tensors as stored: a quantized checkpoint would keep
// codes and scales for tensors it did not touch and lose them for those it did (and its
// quantization_config would still claim every weight), so it is refused before anything is read.
void refuse_quantized(const formats::Checkpoint& ck, std::string_view edit) {
    const auto scheme = !ck.quantization.empty() ? ck.quantization : ck.undecoded_quantization;
    if (scheme.empty()) return;
    const TensorInfo* first = nullptr;
    for (const auto& t : ck.tensors)
        if (t.quant && t.quant->scheme != QuantScheme::strided && !first) first = &t;
    throw_input_error(
        first ? first->path() : ck.path, first ? first->name : "",
        fmt::format("edit {} does not write quantized checkpoints (found {}{}): the stored codes "
                    "and scales cannot be rewritten in place; compare and analyze read them",
                    edit, scheme, first ? ", " + first->quant->description : ""));
}

EditPlan plan_edit(const EditJob& job) {
    const auto& primary = *job.primary;
    refuse_quantized(primary, job.record.edit);
    for (const auto* ck : job.aligned) refuse_quantized(*ck, job.record.edit);
    EditPlan plan;
    for (const auto* ck : job.aligned)
        for (const auto& t : ck->tensors)
            if (!formats::counterpart(primary, *ck, t))
                plan.summary.only_in_other.push_back(fmt::format("{} ({})", t.name, ck->name));
    const auto selected = select_tensors(job);
    for (std::size_t i = 0; i < primary.tensors.size(); ++i)
        plan_tensor(job, primary.tensors[i], selected.roles[i], selected.chosen[i], plan);
    refuse_empty_edit(job, plan);
    return plan;
}

// Where and how the output is written: the primary's other files carried (its weight files and index
// replaced by the output's), the inputs never overwritten, the provenance.
formats::WriteOptions write_options(const EditJob& job, EditSummary& summary) {
    const auto& primary = *job.primary;
    std::vector<const formats::Checkpoint*> all{job.primary};
    all.insert(all.end(), job.aligned.begin(), job.aligned.end());
    formats::WriteOptions w;
    w.max_shard_bytes = job.common.max_shard_bytes;
    if (primary.format == formats::CheckpointFormat::gguf)
        w.weights_file = std::filesystem::path(gguf_file_of(primary)).filename().string();
    w.copy_files_from = primary.directory();
    w.extra_files = job.common.extra_files;
    w.inputs = formats::input_paths(all);
    w.provenance = provenance(job, summary);
    w.complete_provenance = [&summary](nlohmann::json& p) { p["tensors_changed"] = summary.changed; };
    if (!w.copy_files_from.empty()) {
        std::set<std::string> own{primary.format == formats::CheckpointFormat::pytorch
                                      ? "pytorch_model.bin.index.json"
                                      : "model.safetensors.index.json"};
        for (const auto& t : primary.tensors)
            own.insert(std::filesystem::relative(t.path(), w.copy_files_from).generic_string());
        w.replaced_weight_files.assign(own.begin(), own.end());
    }
    return w;
}

// One output tensor's bytes: the edit of its plain views (counted as changed when its bytes differ
// from the primary's plain view), or the primary's stored bytes.
void produce_tensor(const EditJob& job, const TensorInfo& t, const std::optional<EditTensor>& planned,
                    std::span<std::byte> out, EditSummary& summary) {
    if (!planned) {
        const auto bytes = t.bytes();
        std::memcpy(out.data(), bytes.data(), bytes.size());
        return;
    }
    const TensorScope scope(t.path(), t.name);  // a failing factorisation names the tensor
    const PlainViews views(t, planned->inputs);
    EditTensor e = *planned;
    e.tensor = &views.tensor;
    e.inputs = views.input_pointers;
    const auto mask = nonfinite_mask(views.tensor, e.inputs, job.common.allow_nonfinite);
    e.nonfinite = mask.empty() ? nullptr : &mask;
    job.edit(e, out);
    finish_output(views.tensor, mask, out);
    const auto before = views.tensor.bytes();
    if (before.size() != out.size() || std::memcmp(before.data(), out.data(), out.size()) != 0)
        ++summary.changed;
}

// The tensors the output holds, in the primary's order: each of the primary's tensors, except that the
// experts split from a packed tensor (formats/packed_experts.hpp) are written back as that one tensor, in
// its own layout, where its first expert is.
struct OutputTensor {
    formats::TensorSpec spec;
    std::vector<std::size_t> members;    // the primary's tensors written into it
    const TensorInfo* packed = nullptr;  // the packed tensor the members are the experts of
    bool edited = false;                 // some member is rewritten
};

std::vector<OutputTensor> output_tensors(const formats::Checkpoint& primary, const EditPlan& plan) {
    std::vector<OutputTensor> out;
    std::map<std::string, std::size_t> packed_at;
    for (std::size_t i = 0; i < primary.tensors.size(); ++i) {
        const auto& t = primary.tensors[i];
        if (!t.packed) {
            out.push_back({plan.specs[i], {i}, nullptr, plan.tensors[i].has_value()});
            continue;
        }
        const auto& source = t.packed->source;
        const auto [at, fresh] = packed_at.try_emplace(source.name, out.size());
        if (fresh) out.push_back({{source.name, source.dtype, source.shape}, {}, &source, false});
        auto& o = out[at->second];
        o.members.push_back(i);
        if (!plan.tensors[i]) continue;
        // An edited block-quantised tensor is written as F32, as an unpacked one is.
        o.edited = true;
        o.spec.dtype = dtype_is_block(source.dtype) ? DType::F32 : source.dtype;
    }
    return out;
}

// A packed tensor with edited experts: its stored values (a block-quantised one's as F32), then each
// edited expert's values written through its slot; the other experts' bytes stay as stored.
void produce_packed(const EditJob& job, const EditPlan& plan, const OutputTensor& o, std::span<std::byte> out,
                    EditSummary& summary) {
    const auto& source = *o.packed;
    const auto stored = o.spec.dtype == source.dtype ? source.bytes() : plain_view(source).bytes();
    std::memcpy(out.data(), stored.data(), stored.size());
    const std::size_t size = dtype_size(o.spec.dtype);
    for (const auto i : o.members) {
        if (!plan.tensors[i]) continue;
        const auto& t = job.primary->tensors[i];
        const auto& spec = plan.specs[i];
        std::vector<std::byte> edited(spec.nbytes());
        produce_tensor(job, t, plan.tensors[i], edited, summary);
        const auto& slot = *t.packed;
        std::vector<float> values(static_cast<std::size_t>(slot.rows * slot.cols));
        convert_to_f32(edited.data(), spec.dtype, values.size(), values.data());
        for (std::int64_t r = 0; r < slot.rows; ++r)
            for (std::int64_t c = 0; c < slot.cols; ++c) {
                const auto e =
                    static_cast<std::size_t>(slot.first + r * slot.row_stride + c * slot.col_stride);
                convert_from_f32(&values[static_cast<std::size_t>(r * slot.cols + c)], o.spec.dtype, 1,
                                 out.data() + e * size);
            }
    }
}

}  // namespace

// The stages: plan (and refuse) before anything is written, then write the tensors in the primary's
// order as the writer asks for them.
EditSummary run_edit(const std::string& out_dir, const EditJob& job) {
    const auto& primary = *job.primary;
    auto plan = plan_edit(job);
    const auto w = write_options(job, plan.summary);
    const auto outputs = output_tensors(primary, plan);
    std::vector<formats::TensorSpec> specs;
    for (const auto& o : outputs) specs.push_back(o.spec);
    std::size_t next = 0;  // tensors are produced in the order given
    Progress progress("edit", specs.size(), static_cast<bool>(job.common.progress), job.common.progress);
    const formats::TensorProducer produce = [&](const formats::TensorSpec& spec, std::span<std::byte> out) {
        std::size_t i = next < specs.size() && specs[next].name == spec.name ? next : 0;
        while (i < specs.size() && specs[i].name != spec.name) ++i;
        next = i + 1;
        const auto& o = outputs[i];
        if (o.packed && o.edited)
            produce_packed(job, plan, o, out, plan.summary);
        else if (o.packed)
            std::memcpy(out.data(), o.packed->bytes().data(), out.size());
        else
            produce_tensor(job, primary.tensors[o.members.front()], plan.tensors[o.members.front()], out,
                           plan.summary);
        progress.advance();
    };
    if (primary.format == formats::CheckpointFormat::gguf) {
        // The GGUF is re-read for its stored metadata and ggml types; its tensors are the primary's.
        const auto source = formats::open_gguf(gguf_file_of(primary));
        std::vector<std::optional<DType>> rewritten;
        for (std::size_t i = 0; i < outputs.size(); ++i) {
            if (source.tensors.size() != outputs.size() || source.tensors[i].name != specs[i].name)
                throw std::logic_error("run_edit: the GGUF's tensors differ from the checkpoint's");
            rewritten.push_back(outputs[i].edited ? std::optional<DType>(specs[i].dtype) : std::nullopt);
        }
        formats::write_model_directory(out_dir, w, [&](const std::string& tmp) {
            formats::write_gguf((std::filesystem::path(tmp) / w.weights_file).string(), source, rewritten,
                                produce);
        });
    } else {
        formats::write_checkpoint(out_dir, specs, produce, w);
    }
    progress.finish();
    return plan.summary;
}

bool inputs_differ(const EditTensor& e) {
    const auto& t = *e.tensor;
    return std::any_of(e.inputs.begin(), e.inputs.end(), [&](const TensorInfo* other) {
        if (other->dtype != t.dtype || other->shape != t.shape || other->rope_head_rows != t.rope_head_rows)
            return true;
        const auto a = t.bytes(), b = other->bytes();
        return a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size()) != 0;
    });
}

void decode_into(const TensorInfo& t, std::span<double> out) {
    if (out.size() != static_cast<std::size_t>(t.numel()))
        throw std::logic_error("decode: output size does not match the tensor");
    convert_to_f64(t.bytes().data(), t.dtype, out.size(), out.data());
}

std::vector<double> decode(const TensorInfo& t) {
    std::vector<double> v(static_cast<std::size_t>(t.numel()));
    decode_into(t, v);
    return v;
}

void encode(std::span<const double> values, DType dtype, std::span<std::byte> out) {
    if (out.size() != values.size() * dtype_size(dtype))
        throw std::logic_error("encode: output size does not match the values");
    if (dtype == DType::F64) {
        std::memcpy(out.data(), values.data(), out.size());
        return;
    }
    constexpr std::size_t kChunk = 1 << 16;  // bounded scratch
    std::vector<float> f(std::min(kChunk, values.size()));
    for (std::size_t start = 0; start < values.size(); start += kChunk) {
        const std::size_t n = std::min(kChunk, values.size() - start);
        for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>(values[start + i]);
        convert_from_f32(f.data(), dtype, n, out.data() + start * dtype_size(dtype));
    }
}

void edit_matrices(const EditTensor& t, bool per_head, const MatrixFn& fn, std::span<std::byte> out) {
    const std::int64_t rows = stored_rows(*t.tensor), cols = stored_cols(*t.tensor);
    auto as_matrix = [&](const TensorInfo& info) {
        Matrix<double> m(rows, cols);
        decode_masked_into(t, info, m.data);
        return m;
    };
    std::vector<Matrix<double>> whole{as_matrix(*t.tensor)};
    for (const auto* in : t.inputs) whole.push_back(as_matrix(*in));

    const auto blocks =
        per_head ? model::head_blocks(*t.schema, *t.tensor, t.role.role) : std::vector<model::HeadBlock>{};
    if (blocks.empty()) {
        auto result = fn(whole, t.tensor->name);
        encode(result.data, t.tensor->dtype, out);
        return;
    }
    Matrix<double> result = whole[0];
    for (const auto& hb : blocks) {
        const auto& b = hb.block;  // stored coordinates
        std::vector<Matrix<double>> parts;
        for (const auto& w : whole) {
            Matrix<double> p(b.rows, b.cols);
            for (std::int64_t r = 0; r < b.rows; ++r)
                for (std::int64_t c = 0; c < b.cols; ++c) p(r, c) = w(b.row0 + r, b.col0 + c);
            parts.push_back(std::move(p));
        }
        const auto unit = fmt::format("{}#{}:{}", t.tensor->name, model::role_name(hb.proj), hb.head);
        const auto edited = fn(parts, unit);
        for (std::int64_t r = 0; r < b.rows; ++r)
            for (std::int64_t c = 0; c < b.cols; ++c) result(b.row0 + r, b.col0 + c) = edited(r, c);
    }
    encode(result.data, t.tensor->dtype, out);
}

// Σ_{c in comps} s[c] u_c v_cᵀ added into `out` (m × n).
void add_components(const linalg::Svd& f, const std::vector<double>& s, std::size_t first,
                    Matrix<double>& out) {
    const std::int64_t m = out.rows, n = out.cols;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::size_t c = first; c < s.size(); ++c) {
        const auto cc = static_cast<std::int64_t>(c);
        for (std::int64_t j = 0; j < n; ++j) v[static_cast<std::size_t>(j)] = f.v(j, cc);
        for (std::int64_t i = 0; i < m; ++i) {
            const double a = s[c] * f.u(i, cc);
            if (a == 0) continue;
            double* row = &out(i, 0);
            for (std::int64_t j = 0; j < n; ++j) row[j] += a * v[static_cast<std::size_t>(j)];
        }
    }
}

EditSummary run_matrix_edit(const std::string& out_dir, const EditRecord& record,
                            const formats::Checkpoint& primary,
                            std::vector<const formats::Checkpoint*> aligned, const EditCommon& common,
                            const MatrixFn& fn) {
    EditJob job;
    job.record = record;
    job.primary = &primary;
    job.aligned = std::move(aligned);
    job.editable = Editable::matrices;
    job.common = common;
    job.edit = [&](const EditTensor& t, std::span<std::byte> out) {
        edit_matrices(t, common.per_head, fn, out);
    };
    return run_edit(out_dir, job);
}

std::vector<double> parse_grid(const std::string& text, const std::string& flag, std::int64_t max_count) {
    auto number = [&](const std::string& s) {
        std::size_t used = 0;
        double v = 0;
        try {
            v = std::stod(s, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != s.size() || !std::isfinite(v))
            throw InputError(fmt::format("{}: '{}' is not a number (in '{}')", flag, s, text));
        return v;
    };
    const std::string what = fmt::format("{} '{}'", flag, text);
    std::vector<double> out;
    if (text.find(':') != std::string::npos) {
        std::vector<std::string> parts;
        std::stringstream ss(text);
        for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
        if (parts.size() != 3)
            throw InputError(fmt::format("{}: expected START:STOP:STEP, found '{}'", flag, text));
        const double start = number(parts[0]), stop = number(parts[1]), step = number(parts[2]);
        if (step <= 0 || stop < start)
            throw InputError(fmt::format("{}: expected STEP > 0 and STOP >= START, found '{}'", flag, text));
        // Counted in double before anything is made: a tiny step means billions of values (or inf).
        const double count = std::floor((stop - start) / step + 1e-6) + 1;
        if (!(count <= static_cast<double>(max_count))) throw_too_many_candidates(what, count, max_count);
        const auto n = static_cast<std::int64_t>(count) - 1;
        for (std::int64_t i = 0; i <= n; ++i) {
            // Rounded to 1e-12 so that 0.1 * 3 prints and compares as 0.3.
            out.push_back(std::round((start + static_cast<double>(i) * step) * 1e12) / 1e12);
        }
    } else {
        const auto items = split_list(text);
        if (static_cast<std::int64_t>(items.size()) > max_count)
            throw_too_many_candidates(
                what, static_cast<double>(std::count(text.begin(), text.end(), ',') + 1), max_count);
        for (const auto& p : items) out.push_back(number(p));
    }
    if (out.empty()) throw InputError(fmt::format("{}: empty grid '{}'", flag, text));
    return out;
}

}  // namespace diffract::edit
