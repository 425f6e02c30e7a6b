// diffract watch RUN_DIR --out DIR: the spectra of a training run over its steps, as checkpoints appear.
#include <fmt/format.h>

#include "commands/commands.hpp"
#include "commands/run_options.hpp"
#include "diffract/core/error.hpp"
#include "diffract/watch/watch.hpp"

namespace diffract::cli {
namespace {

int run_watch(watch::WatchOptionText text, bool no_heads, int quiet) {
    text.heads = !no_heads;
    text.run.quiet = quiet;
    auto o = watch::parse_watch_options(text);
    // --quiet: the summary line (and warnings) only; -qq: nothing.
    o.notice = [quiet](const std::string& line) {
        if (quiet == 0) fmt::print(stderr, "{}\n", one_line(line));
    };
    o.warning = [quiet](const std::string& line) {
        if (quiet < 2) fmt::print(stderr, "{}\n", one_line(line));
    };
    const auto r = watch::watch(o);
    if (quiet < 2) {
        std::size_t analysed = 0, reused = 0;
        for (const auto& c : r.checkpoints)
            analysed += c.status == watch::CheckpointStatus::analysed,
                reused += c.status == watch::CheckpointStatus::reused;
        fmt::print(stderr,
                   "watch: {} checkpoints ({} computed, {} reused from the store), {} alerts -> {}/\n",
                   analysed + reused, analysed, reused, r.alerts.size(), text.out);
    }
    return 0;
}

}  // namespace

void add_watch(CLI::App& app) {
    auto t = std::make_shared<watch::WatchOptionText>();
    auto no_heads = std::make_shared<bool>(false);
    auto* sub = app.add_subcommand(
        "watch", "Spectra of a training run over its steps: every checkpoint in RUN_DIR, as they appear");
    sub->add_option("run_dir", t->run_dir,
                    "The run's directory: checkpoint-<step>/ (Trainer), step-named model dirs or files")
        ->required();
    sub->add_option("--out", t->out, "Output directory (metrics.csv with a step column, trends, alerts, ...)")
        ->required();
    sub->add_option("--base", t->base,
                    "Compare every checkpoint with this model (compare.csv, heads.csv); the base of adapter "
                    "checkpoints");
    sub->add_option("--metrics", t->metrics, "default, all, or a comma-separated list of fields")
        ->capture_default_str();
    sub->add_flag("--no-heads", *no_heads, "Whole matrices only (no per-head rows)");
    sub->add_option("--precision", t->kernel.precision, "f32 or f64 SVD")->capture_default_str();
    sub->add_option("--svd-route", t->kernel.svd_route, "Singular values: auto, gesdd or gram")
        ->capture_default_str();
    sub->add_option("--seed", t->kernel.seed, "Seed of the permutation null (-1: unseeded)")
        ->capture_default_str();
    sub->add_option("--min-fit-size", t->kernel.min_fit_size, "Fewest tail eigenvalues a fit is reported on")
        ->capture_default_str();
    sub->add_flag("--delta-only", t->delta_only,
                  "With --base: compare's delta fields only (one values-only SVD per delta; head importance "
                  "needs no more)");
    sub->add_flag("--follow", t->follow, "Keep watching for new checkpoints until Ctrl-C or --until-step");
    sub->add_option("--every", t->every, "Watch only steps that are multiples of N")->capture_default_str();
    sub->add_option("--until-step", t->until_step, "Stop once a checkpoint at or past this step is analysed");
    sub->add_option("--poll", t->poll, "--follow: seconds between looks at RUN_DIR")->capture_default_str();
    sub->add_option("--settle", t->settle, "Read a checkpoint once nothing wrote to it for this many seconds")
        ->capture_default_str();
    sub->add_option("--alpha-low", t->thresholds.alpha_low,
                    "Alert: pl_alpha below it (over-fit; WeightWatcher: 2)")
        ->capture_default_str();
    sub->add_option("--alpha-high", t->thresholds.alpha_high,
                    "Alert: pl_alpha above it (under-trained; WeightWatcher: 6)")
        ->capture_default_str();
    sub->add_option("--alpha-jump", t->thresholds.alpha_jump,
                    "Alert: pl_alpha moving more than this between checkpoints")
        ->capture_default_str();
    sub->add_option("--stable-rank-jump", t->thresholds.stable_rank_jump,
                    "Alert: stable rank changing by more than this fraction between checkpoints")
        ->capture_default_str();
    sub->add_option(
           "--head-share", t->thresholds.head_share,
           "Alert (with --base): the largest tenth of heads holding more than this share of the update")
        ->capture_default_str();
    add_run_options(sub, t->run);
    sub->footer(
        "Exit status: 0 when a checkpoint was analysed or reused; 2 for bad input, and for a one-shot "
        "watch in which every checkpoint found ends skipped (nothing current was read; the line says why "
        "for each); 130 when interrupted. --quiet prints only the summary line (and warnings).");
    on_run(sub, [t, no_heads] { return run_watch(*t, *no_heads, t->run.quiet); });
}

}  // namespace diffract::cli
