// diffract compare --base PRE MODEL... [--reference REF] --out DIR: every matrix and head of each model
// against the base (compare.csv), and the per-head update norms, importance and ranking (heads.csv).
#include <fmt/format.h>

#include "commands/commands.hpp"
#include "commands/run_options.hpp"
#include "diffract/analysis/option_values.hpp"
#include "diffract/core/error.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/compare.hpp"
#include "diffract/run/distributed.hpp"
#include "diffract/run/shipped_inputs.hpp"

namespace diffract::cli {
namespace {

// The library's compare options (their defaults included), plus the inputs, the output and the run
// options.
struct CompareArgs : run::CompareOptionText {
    std::string base;
    std::vector<std::string> models;
    std::string reference;
    std::string out;
    bool no_heads = false;  // --no-heads: heads = false
    run::RunOptionText run;
};

int run_compare(const CompareArgs& a) {
    run::CompareOptions o;
    o.run = run::parse_run_options(a.run);
    o.base = run::open_input(a.base, o.run.ship_inputs);
    for (const auto& spec : a.models) o.models.push_back(run::open_input(spec, o.run.ship_inputs));
    if (!a.reference.empty()) o.reference = run::open_input(a.reference, o.run.ship_inputs);
    auto text = static_cast<const run::CompareOptionText&>(a);
    text.heads = !a.no_heads;
    run::apply_compare_options(text, o);
    o.run.out = a.out;
    const auto result = run::compare(o);
    if (!run::distributed().is_root()) return 0;  // rank 0 gathered the results and writes the outputs
    for (const auto& s : result.skipped)
        fmt::print(stderr, "diffract: warning: skipped: {}\n", one_line(s.reason));
    for (const auto& w : result.warnings) fmt::print(stderr, "diffract: warning: {}\n", one_line(w));
    if (a.run.quiet < 2)
        for (const auto& f : result.findings) fmt::print(stderr, "compare: {}\n", one_line(f));
    run::write_compare_csvs(result, a.out);
    if (a.run.quiet < 2)
        fmt::print(stderr,
                   "compare: {} rows ({} computed{}, {} reused from {}{}), {} heads{} -> {}/compare.csv, "
                   "{}/heads.csv\n",
                   result.rows.size(), result.computed,
                   // --delta-only reads whole matrices by design: that is its route, not a fallback.
                   o.route == linalg::SvdRoute::auto_route && !o.delta_only && result.computed > 0
                       ? fmt::format(", {} on the whole-matrix fallback", result.whole_route)
                       : "",
                   result.reused, o.run.resolved_store(),
                   result.computed == 0 && result.reused > 0
                       ? fmt::format(": all {} results reused from the store", result.reused)
                       : "",
                   result.heads.size(),
                   result.skipped.empty() ? "" : fmt::format(", {} skipped", result.skipped.size()), a.out,
                   a.out);
    return 0;
}

}  // namespace

void add_compare(CLI::App& app) {
    auto a = std::make_shared<CompareArgs>();
    auto* sub = app.add_subcommand(
        "compare", "Compare models with a base model: per matrix, per head block, and head ranking");
    sub->add_option("--base", a->base, "The base (pre-trained) checkpoint")->required();
    sub->add_option("models", a->models,
                    "Checkpoints to compare with the base (PATH, org/name[@rev], NAME=PATH)");
    sub->add_option("--reference", a->reference,
                    "Reference model of the head-importance score (compared with the base too)");
    sub->add_option("--out", a->out, "Output directory for compare.csv and heads.csv")->required();
    sub->add_option("--top-k", a->top_k, "Components of the top-k agreement (the largest singular values)")
        ->capture_default_str();
    sub->add_option("--scale-scope", a->scale_scope,
                    "Min-max scaling of the importance score: global, layer or projection")
        ->capture_default_str();
    sub->add_option("--order", a->order, "Head ranking: importance, agreement, pl_ks or random")
        ->capture_default_str();
    sub->add_option("--seed", a->seed, "Seed of --order random and of the expert overlaps' chance floor")
        ->capture_default_str()
        ->check(unsigned_seed());
    sub->add_option("--precision", a->precision, "f32 or f64 SVD")->capture_default_str();
    sub->add_option("--svd-route", a->svd_route, "Singular values of the delta: auto, gesdd or gram")
        ->capture_default_str();
    sub->add_flag("--no-heads", a->no_heads, "Whole matrices only (no head blocks, no heads.csv rows)");
    sub->add_flag("--allow-partial", a->allow_partial,
                  "Skip mismatched tensors / head geometry (listed in skipped.csv) and matrices of a type "
                  "that is not decoded instead of failing");
    sub->add_flag("--delta-only", a->delta_only,
                  "Only the delta fields (delta_*, rel_delta_frob_norm; the rest NaN): a LoRA adapter on "
                  "this base is computed from its factors");
    sub->add_option("--overlap-k", a->overlap_k,
                    "A mixture of experts: components of each routed expert's read and write subspaces "
                    "compared pairwise per layer (expert_overlap.csv; 0: none)")
        ->capture_default_str();
    add_run_options(sub, a->run);
    add_distribution_options(sub, a->run);
    on_run(sub, [a] { return run_compare(*a); });
}

}  // namespace diffract::cli
