// LoRA edits: merging an adapter into its base (merge-lora), and the best rank-R approximation of a
// CPT delta written as a PEFT adapter (truncate --as-lora).
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/formats/checkpoint_writer.hpp"
#include "diffract/formats/lora_adapter.hpp"
#include "diffract/linalg/backend.hpp"

namespace fs = std::filesystem;

namespace diffract::edit {

EditSummary merge_lora(const std::string& out_dir, const formats::Checkpoint& base,
                       const formats::Checkpoint& merged, const EditCommon& common) {
    if (merged.adapter.empty()) throw InputError("merge-lora: the model has no LoRA adapter");
    EditJob job;
    job.record = {"merge-lora", {{"adapter", merged.adapter}}};
    job.primary = &base;
    job.aligned = {&merged};
    job.editable = Editable::any_float;
    job.common = common;
    // A tensor the adapter leaves alone is the base's own (the same stored bytes): copied, not rewritten.
    job.touches = [&merged](const EditTensor& e) {
        const TensorInfo* m = merged.find(e.tensor->name);
        return !m || m->path() != e.tensor->path() || m->offset != e.tensor->offset;
    };
    // The merged values (W + scale·B·A, computed in f64) rounded once into the base's dtype, as
    // PEFT's merge_and_unload stores them; tensors the adapter does not touch round-trip exactly.
    job.edit = [](const EditTensor& e, std::span<std::byte> out) {
        encode(decode_masked(e, *e.inputs[0]), e.tensor->dtype, out);
    };
    return run_edit(out_dir, job);
}

namespace {

bool lora_role(model::Role r) {
    return r != model::Role::embed && r != model::Role::lm_head && r != model::Role::norm &&
           r != model::Role::other;
}

// A regular expression matching `name` literally (PEFT's pattern keys are regular expressions).
std::string escape_regex(const std::string& name) {
    std::string out;
    for (char c : name) {
        if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

struct LoraTarget {
    const TensorInfo* model = nullptr;
    const TensorInfo* base = nullptr;
    std::string module;
    int k = 0;
};

// What --as-lora refuses before reading any matrix: no rank, --per-head, GGUF inputs.
int check_as_lora(const formats::Checkpoint& base, const formats::Checkpoint& model, std::optional<int> rank,
                  const EditCommon& common) {
    if (!rank) throw InputError("edit truncate --as-lora: give the adapter's rank with --rank");
    if (common.per_head) throw InputError("edit truncate --as-lora: --per-head has no LoRA form");
    if (*rank <= 0)
        throw InputError(fmt::format("truncate --as-lora: --rank must be at least 1, found {}", *rank));
    for (const auto* ck : {&base, &model})
        if (ck->format ==
            formats::CheckpointFormat::gguf)  // llama.cpp's names are not the modules PEFT targets
            throw_input_error(ck->path, "",
                              "truncate --as-lora writes a PEFT adapter, which names Hugging Face modules: "
                              "give the Hugging Face checkpoints (found gguf)");
    return *rank;
}

// The selected 2-D projections of the model, each with its base matrix (same shape) and its rank (the
// requested one, or the matrix's full rank when smaller); every other floating tensor is listed as
// not in the adapter.
std::vector<LoraTarget> plan_targets(const formats::Checkpoint& base, const formats::Checkpoint& model,
                                     int rank, const EditCommon& common, LoraExportSummary& summary) {
    std::vector<LoraTarget> targets;
    for (const auto& t : model.tensors) {
        const auto role = model::classify_tensor(t.name);
        const bool matrix = t.shape.size() == 2 && dtype_is_float(t.dtype) && t.name.ends_with(".weight");
        if (!matrix || !lora_role(role.role) || !common.selection.selects(t.name, role)) {
            if (dtype_is_float(t.dtype)) summary.not_in_adapter.push_back(t.name);
            continue;
        }
        const auto* b = base.find(t.name);
        if (!b) throw_input_error(base.path, t.name, "the base lacks a matrix of the model");
        if (b->shape != t.shape)
            throw_input_error(b->path(), t.name,
                              fmt::format("shape differs from the model's (expected {}, found {})",
                                          shape_string(t.shape), shape_string(b->shape)));
        const int k = static_cast<int>(std::min<std::int64_t>(rank, std::min(t.shape[0], t.shape[1])));
        targets.push_back({&t, b, t.name.substr(0, t.name.size() - 7), k});
    }
    if (targets.empty()) throw InputError("truncate --as-lora: no projection matrix is selected");
    return targets;
}

// adapter_config.json: scale alpha / r = 1, so B·A is the truncated delta itself; a matrix smaller than
// the rank gets its own r and alpha through rank_pattern / alpha_pattern.
nlohmann::ordered_json adapter_config(const formats::Checkpoint& base, const std::vector<LoraTarget>& targets,
                                      int rank, bool transposed) {
    nlohmann::ordered_json config;
    config["peft_type"] = "LORA";
    config["base_model_name_or_path"] = fs::absolute(base.path).string();
    config["r"] = rank;
    config["lora_alpha"] = rank;
    config["lora_dropout"] = 0.0;
    config["bias"] = "none";
    config["fan_in_fan_out"] = transposed;
    config["use_rslora"] = false;
    config["use_dora"] = false;
    config["inference_mode"] = true;
    config["modules_to_save"] = nullptr;
    config["task_type"] = nullptr;
    nlohmann::ordered_json modules = nlohmann::ordered_json::array(),
                           rank_pattern = nlohmann::ordered_json::object(),
                           alpha_pattern = nlohmann::ordered_json::object();
    for (const auto& t : targets) {
        modules.push_back(t.module);
        if (t.k != rank) {
            rank_pattern[escape_regex(t.module)] = t.k;
            alpha_pattern[escape_regex(t.module)] = t.k;
        }
    }
    config["target_modules"] = modules;
    config["rank_pattern"] = rank_pattern;
    config["alpha_pattern"] = alpha_pattern;
    return config;
}

// The factors of one target's truncated delta, computed once for its A and its B (the writer asks for
// them one after the other).
class TruncatedFactors {
public:
    TruncatedFactors(linalg::Device device, bool transposed)
        : backend_(linalg::make_backend(device)), transposed_(transposed) {}

    const Matrix<double>& get(const LoraTarget& t, bool a) {
        if (cached_for_ != &t) compute(t);
        return a ? a_ : b_;
    }

private:
    void compute(const LoraTarget& t) {
        const std::int64_t rows = t.model->shape[0], cols = t.model->shape[1];
        auto delta = read_matrix<double>(*t.model, {0, rows, 0, cols, false});
        const auto w0 = read_matrix<double>(*t.base, {0, rows, 0, cols, false});
        for (std::size_t i = 0; i < delta.data.size(); ++i) delta.data[i] -= w0.data[i];
        if (!std::all_of(delta.data.begin(), delta.data.end(), [](double x) { return std::isfinite(x); }))
            throw_input_error(t.model->path(), t.model->name, "the delta holds NaN or Inf values");
        const auto f = backend_->svd(delta);  // ascending singular values
        // Stored D = U S Vᵀ. Unstored (fan_in_fan_out) the delta is Dᵀ = V S Uᵀ: B = V S, A = Uᵀ.
        const auto& left = transposed_ ? f.v : f.u;
        const auto& right = transposed_ ? f.u : f.v;
        const std::size_t n = f.s.size();
        b_ = Matrix<double>(left.rows, t.k);
        a_ = Matrix<double>(t.k, right.rows);
        for (int c = 0; c < t.k; ++c) {
            const std::size_t j = n - 1 - static_cast<std::size_t>(c);
            for (std::int64_t i = 0; i < left.rows; ++i)
                b_(i, c) = left(i, static_cast<std::int64_t>(j)) * f.s[j];
            for (std::int64_t i = 0; i < right.rows; ++i) a_(c, i) = right(i, static_cast<std::int64_t>(j));
        }
        cached_for_ = &t;
    }

    std::unique_ptr<linalg::Backend> backend_;
    bool transposed_;
    const LoraTarget* cached_for_ = nullptr;
    Matrix<double> a_, b_;
};

// The adapter directory: adapter_model.safetensors alone, adapter_config.json and the provenance.
formats::WriteOptions adapter_write_options(const formats::Checkpoint& base, const formats::Checkpoint& model,
                                            const nlohmann::ordered_json& config, int rank,
                                            const LoraExportSummary& summary, std::size_t modules) {
    formats::WriteOptions options;
    options.max_shard_bytes = UINT64_MAX;
    options.weights_file = "adapter_model.safetensors";
    options.inputs = formats::input_paths({&base, &model});
    options.extra_files["adapter_config.json"] = json_text(config, 2) + "\n";
    nlohmann::json inputs = nlohmann::json::array();
    inputs.push_back({{"name", base.name}, {"path", base.path}, {"role", "base"}});
    inputs.push_back({{"name", model.name}, {"path", model.path}, {"role", "model"}});
    options.provenance = nlohmann::json::object();
    options.provenance["tool"] = "diffract";
    options.provenance["edit"] = "truncate";
    options.provenance["parameters"] = {{"rank", rank}, {"as_lora", true}};
    options.provenance["inputs"] = inputs;
    options.provenance["modules"] = modules;
    options.provenance["not_in_adapter"] = summary.not_in_adapter;
    return options;
}

}  // namespace

LoraExportSummary truncate_as_lora(const std::string& out_dir, const formats::Checkpoint& base,
                                   const formats::Checkpoint& model, std::optional<int> rank_given,
                                   const EditCommon& common) {
    const int rank = check_as_lora(base, model, rank_given, common);
    const bool transposed = model.schema.conv1d_transposed;
    LoraExportSummary summary;
    const auto targets = plan_targets(base, model, rank, common, summary);
    std::vector<formats::TensorSpec> specs;
    std::map<std::string, std::pair<const LoraTarget*, bool>> by_key;  // key -> target, is A
    for (const auto& t : targets) {
        const std::int64_t out = transposed ? t.model->shape[1] : t.model->shape[0];
        const std::int64_t in = transposed ? t.model->shape[0] : t.model->shape[1];
        const std::string key = "base_model.model." + t.module;
        specs.push_back({key + ".lora_A.weight", DType::F32, {t.k, in}});
        specs.push_back({key + ".lora_B.weight", DType::F32, {out, t.k}});
        by_key[specs[specs.size() - 2].name] = {&t, true};
        by_key[specs.back().name] = {&t, false};
    }
    TruncatedFactors factors(common.device, transposed);
    formats::write_checkpoint(
        out_dir, specs,
        [&](const formats::TensorSpec& spec, std::span<std::byte> out) {
            const auto& [t, is_a] = by_key.at(spec.name);
            encode(factors.get(*t, is_a).data, DType::F32, out);
        },
        adapter_write_options(base, model, adapter_config(base, targets, rank, transposed), rank, summary,
                              targets.size()));
    summary.modules = targets.size();
    return summary;
}

EditSummary merge_lora_adapter(const std::string& out_dir, const std::string& base_spec,
                               const std::string& adapter_dir, const EditCommon& common) {
    const auto merged = formats::open_lora_model("", base_spec, adapter_dir);
    const auto base =
        formats::open_checkpoint(base_spec.empty() ? formats::lora_base_model(adapter_dir) : base_spec);
    return merge_lora(out_dir, base, merged, common);
}

}  // namespace diffract::edit
