// diffract analyze PATH... --out DIR: the metric catalog for every matrix and head.
#include <fmt/format.h>

#include "commands/commands.hpp"
#include "commands/run_options.hpp"
#include "diffract/analysis/option_values.hpp"
#include "diffract/core/error.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/analyze.hpp"
#include "diffract/run/distributed.hpp"
#include "diffract/run/shipped_inputs.hpp"

namespace diffract::cli {
namespace {

struct AnalyzeArgs {
    std::vector<std::string> models;
    std::string out;
    std::string metrics = "default";
    bool no_heads = false;
    bool allow_partial = false;
    analysis::KernelOptionText kernel;
    std::string convention = "diffract";
    run::RunOptionText run;
};

int run_analyze(const AnalyzeArgs& a) {
    run::AnalyzeOptions o;
    o.run = run::parse_run_options(a.run);
    o.run.selection.allow_partial = a.allow_partial;
    for (const auto& spec : a.models) o.models.push_back(run::open_input(spec, o.run.ship_inputs));
    o.metrics = analysis::resolve_metrics(a.metrics);
    o.heads = !a.no_heads;
    o.kernel = analysis::parse_kernel_options(a.kernel);
    o.convention = analysis::parse_convention(a.convention);
    o.run.out = a.out;
    const auto result = run::analyze(o);
    if (!run::distributed().is_root()) return 0;  // rank 0 gathered the results and writes the outputs
    for (const auto& w : result.warnings) fmt::print(stderr, "diffract: warning: {}\n", one_line(w));
    run::write_analyze_csvs(result, a.out);
    if (a.run.quiet < 2)
        fmt::print(stderr, "analyze: {} matrices ({} computed, {} reused from {}{}) -> {}/metrics.csv\n",
                   result.rows.size(), result.computed, result.reused, o.run.resolved_store(),
                   result.computed == 0 && result.reused > 0
                       ? fmt::format(": all {} results reused from the store", result.reused)
                   : result.computed > 0 && result.reused > 0
                       // Units are whole matrices and head blocks of very different cost: a resumed run
                       // says how much of the work it really redid.
                       ? fmt::format("; the computed ones {:.0f} % of the work", 100 * result.computed_work)
                       : "",
                   a.out);
    return 0;
}

}  // namespace

void add_analyze(CLI::App& app) {
    auto a = std::make_shared<AnalyzeArgs>();
    auto* sub =
        app.add_subcommand("analyze", "Compute the metric catalog for every matrix and attention head");
    sub->add_option("models", a->models, "Checkpoints (PATH, org/name[@rev], NAME=PATH)")->required();
    sub->add_option("--out", a->out, "Output directory for metrics.csv and aggregates.csv")->required();
    sub->add_option("--metrics", a->metrics,
                    "default, all, or a comma-separated list of fields (see `diffract metrics`)")
        ->capture_default_str();
    sub->add_flag("--no-heads", a->no_heads, "Whole matrices only (no per-head rows)");
    sub->add_flag("--allow-partial", a->allow_partial,
                  "Skip matrices of a type or quantization scheme that is not decoded (counted in a warning) "
                  "instead of failing");
    sub->add_option("--precision", a->kernel.precision, "f32 or f64 SVD")->capture_default_str();
    sub->add_option("--svd-route", a->kernel.svd_route,
                    "Singular values: auto, gesdd or gram (see docs/metrics.md)")
        ->capture_default_str();
    sub->add_option("--seed", a->kernel.seed, "Seed of the permutation null (-1: unseeded)")
        ->capture_default_str();
    sub->add_option(
           "--min-fit-size", a->kernel.min_fit_size,
           "Fewest tail (MP: bulk) eigenvalues a fit is reported on; 0: every fit (see docs/metrics.md)")
        ->capture_default_str();
    sub->add_option("--alpha-ci", a->kernel.alpha_ci,
                    "Bootstrap draws for pl_alpha_ci_low/high (95 %; each draw refits the ESD; 0: off)")
        ->capture_default_str();
    sub->add_option("--alpha-ci-seed", a->kernel.alpha_ci_seed, "Seed of the --alpha-ci resampling")
        ->capture_default_str();
    sub->add_option("--null-draws", a->kernel.null_draws,
                    "Permutation-null draws: null fields are their mean, *_null_std their std (each draw one "
                    "SVD of the matrix)")
        ->capture_default_str();
    sub->add_option("--p-value-draws", a->kernel.p_value_draws,
                    "Bootstrap draws behind pl_p_value, tpl_p_value and expon_p_value (each draw one fit; "
                    "not in the default metrics)")
        ->capture_default_str();
    sub->add_option("--convention", a->convention,
                    "diffract, or weightwatcher: also weightwatcher.csv with WeightWatcher's columns and "
                    "definitions (docs/weightwatcher.md)")
        ->capture_default_str();
    add_run_options(sub, a->run);
    add_distribution_options(sub, a->run);
    on_run(sub, [a] { return run_analyze(*a); });
}

}  // namespace diffract::cli
