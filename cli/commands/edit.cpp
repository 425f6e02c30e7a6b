// diffract edit rewind|truncate|transplant|permute|interpolate|merge ... --out DIR: writes an edited HF
// model directory (see include/diffract/edit/edit.hpp and docs/edit.md).
#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "commands/commands.hpp"
#include "commands/run_options.hpp"
#include "diffract/core/error.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/edit/edit_jobs.hpp"
#include "diffract/formats/checkpoint_writer.hpp"
#include "diffract/formats/lora_adapter.hpp"
#include "diffract/run/rewind_job.hpp"

namespace diffract::cli {
namespace {

struct EditArgs {
    std::string out;
    std::string max_shard_size = "5G";
    bool per_head = false;
    bool allow_nonfinite = false;
    run::RunOptionText run;

    // rewind
    std::string base, model, reference, heads_file, order = "importance", scale_scope = "global",
                                                    kv_policy = "all", o_bias = "keep", router = "keep";
    // heads or experts; empty: experts when --experts names some, else heads.
    std::string unit;
    // Optional, not NaN/-1 sentinels: "--fraction nan" is a bad value to name, not an absent option.
    std::optional<double> fraction;
    std::uint64_t seed = 42;
    bool as_lora = false;
    // The other families' options are their library jobs' fields (edit/edit_jobs.hpp); the models are
    // specs here, opened after the job's own checks.
    edit::TruncateJob truncate;
    edit::PermuteJob permute;
    edit::InterpolateJob interpolate;
    std::vector<std::string> pair;  // interpolate's A and B
    edit::MergeJob merge;
    std::vector<std::string> models;  // merge's models
    std::string method = "task_arithmetic";
    bool normalize = false, no_normalize = false;
    edit::MergeLoraJob merge_lora;
};

edit::EditCommon common_of(const EditArgs& a) {
    edit::EditCommonText text;
    static_cast<analysis::SelectionText&>(text) = a.run;
    text.max_shard_size = a.max_shard_size, text.per_head = a.per_head,
    text.allow_nonfinite = a.allow_nonfinite;
    text.device = a.run.device;
    return edit::parse_edit_common(text);
}

void report(const EditArgs& a, const char* what, const edit::EditSummary& s, const std::string& out) {
    if (a.run.quiet >= 2) return;
    fmt::print(stderr, "edit {}: {} tensors edited ({} changed), {} copied -> {}\n", what, s.edited,
               s.changed, s.copied, out);
    if (a.run.quiet) return;
    auto list = [](const std::vector<std::string>& v) {
        std::string text;
        for (std::size_t i = 0; i < v.size() && i < 5; ++i) text += (i ? ", " : "") + v[i];
        return one_line(v.size() > 5 ? fmt::format("{}, ... ({} in all)", text, v.size()) : text);
    };
    if (!s.only_in_primary.empty())
        fmt::print(stderr, "edit {}: note: not in every input, carried from the primary as is: {}\n", what,
                   list(s.only_in_primary));
    if (!s.only_in_other.empty())
        fmt::print(stderr, "edit {}: note: not in the primary input, left out: {}\n", what,
                   list(s.only_in_other));
}

// The options every edit takes: --out, the shard size, --device, --quiet and the selection options.
// Only edits that run an analysis (rewind ranks heads with compare) take --threads, --max-memory and
// --store; the others stream one tensor at a time and would ignore them, so they refuse them.
CLI::App* add_edit_sub(CLI::App* edit, const std::string& name, const std::string& help, EditArgs& a,
                       bool runs_analysis = false) {
    auto* sub = edit->add_subcommand(name, help);
    sub->add_option("--out", a.out, "Output model directory (must not exist)")->required();
    sub->add_option("--max-shard-size", a.max_shard_size, "Largest safetensors shard, e.g. 5G")
        ->capture_default_str();
    if (runs_analysis) {
        add_run_options(sub, a.run);
    } else {
        sub->add_option("--device", a.run.device, "cpu or cuda")->capture_default_str();
        sub->add_flag("--quiet", a.run.quiet, "No notes (twice: no summary line either)");
        add_selection_options(sub, a.run);
    }
    sub->add_flag("--allow-nonfinite", a.allow_nonfinite,
                  "Edit tensors holding NaN/Inf: such entries keep the input's value, the rest is edited "
                  "(default: refuse)");
    return sub;
}

void add_per_head(CLI::App* sub, EditArgs& a) {
    sub->add_flag("--per-head", a.per_head,
                  "Apply to each head block of the attention projections separately");
}

int run_rewind(const EditArgs& a) {
    run::RewindJob job;
    job.fraction = a.fraction;
    job.heads_file = a.heads_file;
    job.unit = edit::rewind_unit_of(a.unit, a.run.experts);
    job.router = edit::parse_router_rows(a.router);
    job.as_lora = a.as_lora;
    job.common = common_of(a);
    job.check();  // before any checkpoint is opened
    const auto base = formats::open_checkpoint(a.base);
    const auto model = formats::open_checkpoint(a.model);
    const auto reference = a.reference.empty() || a.fraction == std::nullopt
                               ? std::nullopt
                               : std::optional(formats::open_checkpoint(a.reference));
    job.out = a.out;
    job.base = &base, job.model = &model, job.reference = reference ? &*reference : nullptr;
    job.ranking = analysis::parse_head_rank_options(a.order, a.scale_scope, a.seed);
    job.kv = edit::parse_kv_policy(a.kv_policy);
    job.o_bias = edit::parse_o_bias(a.o_bias);
    job.run = run::parse_run_options(a.run);
    job.run.progress = false;
    const auto outcome = run::rewind(job);
    const auto& heads = outcome.heads;
    report(a, "rewind", outcome.summary, a.out);
    if (job.unit == edit::RewindUnit::experts) {
        if (a.run.quiet < 2) {
            std::string list;
            for (const auto& e : outcome.experts)
                list +=
                    e.expert ? fmt::format(" {}:{}", e.layer, *e.expert) : fmt::format(" {}:shared", e.layer);
            fmt::print(stderr, "rewound {} experts (layer:expert):{}\n", outcome.experts.size(), list);
        }
        fmt::print("{}\n", (std::filesystem::path(a.out) / "rewound_experts.csv").string());
        return 0;
    }
    if (a.run.quiet < 2) {
        std::string list;
        for (const auto& h : heads) list += fmt::format(" {}:{}", h.layer, h.head);
        fmt::print(stderr, "rewound {} heads (layer:head):{}\n", heads.size(), list);
    }
    fmt::print("{}\n", (std::filesystem::path(a.out) / "rewound_heads.csv").string());
    return 0;
}

int run_truncate(EditArgs& a) {
    auto& job = a.truncate;
    job.check();
    const auto base = formats::open_checkpoint(a.base);
    const auto model = formats::open_checkpoint(a.model);
    job.out = a.out, job.base = &base, job.model = &model, job.common = common_of(a);
    const auto outcome = edit::run_job(job);
    if (outcome.adapter) {
        if (a.run.quiet < 2)
            fmt::print(
                stderr,
                "edit truncate: rank-{} LoRA adapter of {} matrices ({} other tensors not in it) -> {}\n",
                *job.rank, outcome.adapter->modules, outcome.adapter->not_in_adapter.size(), a.out);
        return 0;
    }
    report(a, "truncate", *outcome.summary, a.out);
    return 0;
}

int run_merge_lora(EditArgs& a) {
    auto& job = a.merge_lora;
    job.out = a.out, job.base = a.base, job.common = common_of(a);
    report(a, "merge-lora", *edit::run_job(job).summary, a.out);
    return 0;
}

int run_transplant(const EditArgs& a) {
    const auto base = formats::open_checkpoint(a.base);
    const auto model = formats::open_checkpoint(a.model);
    report(a, "transplant", *edit::run_job(edit::TransplantJob{a.out, &base, &model, common_of(a)}).summary,
           a.out);
    return 0;
}

int run_permute(EditArgs& a) {
    auto& job = a.permute;
    const auto model = formats::open_checkpoint(a.model);
    job.out = a.out, job.model = &model, job.common = common_of(a);
    report(a, "permute", *edit::run_job(job).summary, a.out);
    return 0;
}

int run_interpolate(EditArgs& a) {
    auto& job = a.interpolate;
    job.check();
    const auto ca = formats::open_checkpoint(a.pair[0]);
    const auto cb = formats::open_checkpoint(a.pair[1]);
    job.out = a.out, job.a = &ca, job.b = &cb, job.common = common_of(a);
    const auto outcome = edit::run_job(job);
    if (outcome.summary)
        report(a, "interpolate", *outcome.summary, a.out);
    else if (a.run.quiet < 2)
        fmt::print(stderr, "edit interpolate: {} checkpoints -> {}/omega_*\n", outcome.omegas.size(), a.out);
    return 0;
}

int run_merge(EditArgs& a) {
    if (a.normalize && a.no_normalize)
        throw InputError("edit merge: --normalize and --no-normalize conflict");
    auto& job = a.merge;
    job.options.method = edit::parse_merge_method(a.method);
    using Normalize = edit::MergeOptions::Normalize;
    job.options.normalize = a.normalize      ? Normalize::on
                            : a.no_normalize ? Normalize::off
                                             : Normalize::method_default;
    const auto base = formats::open_checkpoint(a.base);
    std::vector<formats::Checkpoint> models;
    for (const auto& m : a.models) models.push_back(formats::open_checkpoint(m));
    job.out = a.out, job.base = &base, job.common = common_of(a);
    for (const auto& m : models) job.models.push_back(&m);
    report(a, "merge", *edit::run_job(job).summary, a.out);
    return 0;
}

}  // namespace

void add_edit(CLI::App& app) {
    auto* edit = app.add_subcommand("edit", "Write an edited checkpoint (rewind, truncate, transplant, ...)");
    edit->require_subcommand(1);

    {
        auto a = std::make_shared<EditArgs>();
        auto* sub =
            add_edit_sub(edit, "rewind",
                         "Give the lowest-ranked heads' Q, K, V, O blocks (or experts) the base's values", *a,
                         /*runs_analysis=*/true);
        sub->add_option("--base", a->base, "The base (pre-trained) checkpoint")->required();
        sub->add_option("--model", a->model, "The CPT checkpoint to edit")->required();
        sub->add_option("--reference", a->reference, "Reference model of the head-importance score");
        sub->add_option("--unit", a->unit,
                        "heads, or experts (a mixture of experts': every matrix of theirs; default when "
                        "--experts is given)");
        auto* f = sub->add_option("--fraction", a->fraction,
                                  "Rewind round(F x units) lowest-ranked heads (or routed experts)");
        sub->add_option("--heads", a->heads_file, "Rewind the heads listed in this CSV (layer,head)")
            ->excludes(f);
        sub->add_option("--order", a->order, "Head ranking: importance, agreement, pl_ks or random")
            ->capture_default_str();
        sub->add_option("--scale-scope", a->scale_scope, "Importance scaling: global, layer or projection")
            ->capture_default_str();
        sub->add_option("--seed", a->seed, "Seed of --order random")
            ->capture_default_str()
            ->check(unsigned_seed());
        sub->add_option(
               "--kv-policy", a->kv_policy,
               "GQA: rewind a shared K/V block when all (default) or any of its query heads are rewound")
            ->capture_default_str();
        sub->add_option("--o-bias", a->o_bias,
                        "The shared output-projection bias of a layer with rewound heads: keep (the model's) "
                        "or base")
            ->capture_default_str();
        sub->add_option("--router", a->router,
                        "--unit experts: the rewound experts' router rows keep the model's values (keep) or "
                        "take the base's (base)")
            ->capture_default_str();
        sub->add_flag("--as-lora", a->as_lora,
                      "The model is BASE+ADAPTER: write the adapter with the rewound heads' factors zeroed");
        on_run(sub, [a] { return run_rewind(*a); });
    }
    {
        auto a = std::make_shared<EditArgs>();
        auto* sub =
            add_edit_sub(edit, "truncate", "W = W_base + best rank-k approximation of (W - W_base)", *a);
        sub->add_option("--base", a->base, "The base (pre-trained) checkpoint")->required();
        sub->add_option("--model", a->model, "The CPT checkpoint")->required();
        auto& t = a->truncate;
        sub->add_option("--keep", t.keep, "Keep k = ceil(F x min(rows, cols)) singular values of the delta");
        sub->add_option("--rank", t.rank, "Keep k singular values of the delta");
        sub->add_option("--energy", t.energy,
                        "Keep the fewest singular values holding fraction E of sum(s^2)");
        sub->add_flag(
            "--as-lora", t.as_lora,
            "Write the rank-k deltas of the projection matrices as a PEFT LoRA adapter (with --rank)");
        add_per_head(sub, *a);
        on_run(sub, [a] { return run_truncate(*a); });
    }
    {
        auto a = std::make_shared<EditArgs>();
        auto* sub = add_edit_sub(edit, "merge-lora",
                                 "W = W_base + scale B A: a LoRA adapter merged into its base", *a);
        sub->add_option("--adapter", a->merge_lora.adapter, "The PEFT LoRA adapter directory")->required();
        sub->add_option("--base", a->base,
                        "The base checkpoint (default: the adapter's base_model_name_or_path)");
        on_run(sub, [a] { return run_merge_lora(*a); });
    }
    {
        auto a = std::make_shared<EditArgs>();
        auto* sub = add_edit_sub(edit, "transplant", "W = U_model diag(s_base) V_model^T", *a);
        sub->add_option("--base", a->base, "The checkpoint whose singular values are used")->required();
        sub->add_option("--model", a->model, "The checkpoint whose singular vectors are used")->required();
        add_per_head(sub, *a);
        on_run(sub, [a] { return run_transplant(*a); });
    }
    {
        auto a = std::make_shared<EditArgs>();
        auto* sub = add_edit_sub(edit, "permute", "Permute each matrix's singular values (ablation)", *a);
        sub->add_option("--model", a->model, "The checkpoint")->required();
        sub->add_option("--seed", a->permute.seed, "Seed of the permutations")
            ->capture_default_str()
            ->check(unsigned_seed());
        add_per_head(sub, *a);
        on_run(sub, [a] { return run_permute(*a); });
    }
    {
        auto a = std::make_shared<EditArgs>();
        auto* sub = add_edit_sub(edit, "interpolate", "W = (1 - omega) A + omega B", *a);
        sub->add_option("models", a->pair, "A and B")->required()->expected(2);
        auto& j = a->interpolate;
        auto* w = sub->add_option("--omega", j.omega, "Interpolation weight of B");
        sub->add_option("--grid", j.grid, "START:STOP:STEP: one checkpoint per omega in OUT/omega_X.XX")
            ->excludes(w);
        sub->add_option("--max-candidates", j.max_candidates, "Largest --grid allowed")
            ->capture_default_str();
        on_run(sub, [a] { return run_interpolate(*a); });
    }
    {
        auto a = std::make_shared<EditArgs>();
        auto& o = a->merge.options;
        auto* sub =
            add_edit_sub(edit, "merge", "Merge models' deltas from a base (mergekit's definitions)", *a);
        sub->add_option("--base", a->base, "The base checkpoint")->required();
        sub->add_option("--models", a->models, "Models to merge (comma-separated)")
            ->required()
            ->delimiter(',');
        sub->add_option("--method", a->method, "task_arithmetic, ties, dare_linear or dare_ties")
            ->capture_default_str();
        sub->add_option("--weights", o.weights, "One weight per model (default 1 each)")->delimiter(',');
        sub->add_option("--density", o.density, "ties: fraction kept by magnitude; dare: keep probability")
            ->capture_default_str();
        sub->add_option("--lambda", o.lambda, "Scale of the merged delta")->capture_default_str();
        sub->add_flag("--normalize", a->normalize,
                      "Divide by the sum of the (agreeing) weights (ties default)");
        sub->add_flag("--no-normalize", a->no_normalize, "Do not divide by the weights");
        sub->add_option("--seed", o.seed, "Seed of DARE's random drop")
            ->capture_default_str()
            ->check(unsigned_seed());
        on_run(sub, [a] { return run_merge(*a); });
    }
}

}  // namespace diffract::cli
