// diffract sweep rewind|rewind-each|validate|truncate|interpolate ... --eval 'CMD {model}' --out DIR: a grid
// of edited candidates scored by the user's evaluation (see include/diffract/sweep/sweep.hpp, docs/edit.md).
#include <cstdlib>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "commands/commands.hpp"
#include "commands/run_options.hpp"
#include "diffract/core/error.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/sweep/sweep_options.hpp"

namespace diffract::cli {
namespace {

// The library's sweep options, plus the two positional models of `interpolate` and validate's
// --reference given once or twice.
struct SweepArgs : sweep::SweepOptions {
    std::vector<std::string> pair, references;
};

// What `{python}` stands for in the evaluation commands: $DIFFRACT_PYTHON when set, else python3 (which
// the shell finds on PATH).
std::string evaluator_python() {
    const char* python = std::getenv("DIFFRACT_PYTHON");
    return python != nullptr && *python != '\0' ? python : "python3";
}

// Options shared by every sweep: evaluation, output, candidates, run and selection.
CLI::App* add_sweep_sub(CLI::App* sweep, const std::string& name, const std::string& help, SweepArgs& a) {
    auto* sub = sweep->add_subcommand(name, help);
    a.python = evaluator_python();
    sub->add_option("--out", a.out, "Output directory (curve.csv, summary.json, sweep_state.jsonl)")
        ->required();
    sub->add_option("--eval", a.eval,
                    "Evaluation command; {model} is replaced by the candidate's path, {python} by "
                    "$DIFFRACT_PYTHON (default: python3 on PATH)");
    sub->add_option("--select-eval", a.select_eval, "Evaluation that picks the best x");
    sub->add_option("--report-eval", a.report_eval,
                    "Evaluation reported at the x the select evaluation picked");
    sub->add_option("--score-key", a.score_key,
                    "Read the score from this JSON field of stdout (dotted path)");
    sub->add_option("--direction", a.direction,
                    "Which scores are better: higher or lower (default: the one a known --score-key "
                    "implies: perplexity, loss: lower; accuracy, score: higher; required by validate and "
                    "--select-eval otherwise)");
    sub->add_option("--eval-timeout", a.eval_timeout,
                    "Seconds an evaluation may run before it and its children are ended (0: no limit)")
        ->capture_default_str();
    sub->add_flag("--keep", a.keep, "Keep the candidates (in DIR/candidates/)");
    sub->add_option("--max-candidates", a.max_candidates, "Refuse a sweep of more candidates than this")
        ->capture_default_str();
    sub->add_option("--max-shard-size", a.max_shard_size, "Largest safetensors shard of a candidate")
        ->capture_default_str();
    add_run_options(sub, a.run);
    return sub;
}

void add_unit_option(CLI::App* sub, SweepArgs& a) {
    sub->add_option("--unit", a.unit,
                    "heads, or experts (a mixture of experts' routed experts; default when --experts is "
                    "given)");
}

void add_rewind_options(CLI::App* sub, SweepArgs& a) {
    sub->add_option("--base", a.base, "The base (pre-trained) checkpoint")->required();
    sub->add_option("--model", a.model, "The CPT checkpoint")->required();
    sub->add_option("--reference", a.reference, "Reference model of the head-importance score");
    add_unit_option(sub, a);
    sub->add_option("--scale-scope", a.scale_scope, "Importance scaling: global, layer or projection")
        ->capture_default_str();
    sub->add_option("--kv-policy", a.kv_policy,
                    "GQA: rewind a shared K/V block when all or any of its heads are")
        ->capture_default_str();
}

// The rewind sweeps' parameters with their checkpoints opened.
sweep::RewindSweep rewind_inputs(const SweepArgs& a) {
    auto reference =
        a.reference.empty() ? std::nullopt : std::optional(formats::open_checkpoint(a.reference));
    return sweep::rewind_sweep(a, formats::open_checkpoint(a.base), formats::open_checkpoint(a.model),
                               std::move(reference));
}

// What the sweep returned to say: its warnings, then its closing lines (the library prints none).
int print_outputs(const sweep::SweepOutputs& out) {
    for (const auto& w : out.warnings) fmt::print(stderr, "diffract: warning: {}\n", w);
    for (const auto& line : out.lines) fmt::print(stderr, "{}\n", line);
    return 0;
}

}  // namespace

void add_sweep(CLI::App& app) {
    auto* sweep =
        app.add_subcommand("sweep", "Evaluate a grid of edited checkpoints with your benchmark command");
    sweep->require_subcommand(1);
    {
        auto a = std::make_shared<SweepArgs>();
        auto* sub =
            add_sweep_sub(sweep, "rewind", "Rewind curves: orderings x fractions of heads rewound", *a);
        add_rewind_options(sub, *a);
        sub->add_option("--orders", a->orders,
                        "Orderings: importance, agreement, pl_ks, random (comma-separated)")
            ->capture_default_str();
        sub->add_option("--seeds", a->seeds, "Random orderings (seeds SEED .. SEED+N-1)")
            ->capture_default_str();
        sub->add_option("--seed", a->seed, "First seed of the random orderings")
            ->capture_default_str()
            ->check(unsigned_seed());
        sub->add_option("--fractions", a->fractions, "Fractions of heads rewound: START:STOP:STEP or a list")
            ->capture_default_str();
        on_run(sub, [a] {
            const auto config = sweep::sweep_config(*a, sweep::Kind::rewind);
            return print_outputs(sweep::sweep_rewind(config, rewind_inputs(*a)));
        });
    }
    {
        auto a = std::make_shared<SweepArgs>();
        auto* sub =
            add_sweep_sub(sweep, "rewind-each",
                          "Rewind one head (expert) at a time: heads_effect.csv (experts_effect.csv)", *a);
        add_rewind_options(sub, *a);
        on_run(sub, [a] {
            const auto config = sweep::sweep_config(*a, sweep::Kind::rewind_each);
            return print_outputs(sweep::sweep_rewind_each(config, rewind_inputs(*a)));
        });
    }
    {
        auto a = std::make_shared<SweepArgs>();
        auto* sub = add_sweep_sub(sweep, "validate",
                                  "Check the head ranking: one-head rewinds vs importance, least/most "
                                  "important sets vs random, stability",
                                  *a);
        sub->add_option("--base", a->base, "The base (pre-trained) checkpoint")->required();
        sub->add_option("--model", a->model, "The CPT checkpoint")->required();
        sub->add_option("--reference", a->references,
                        "Reference model of the head-importance score; a second --reference checks the "
                        "ranking's stability")
            ->expected(0, 2)
            ->take_all();
        sub->add_option("--scale-scope", a->scale_scope, "Importance scaling: global, layer or projection")
            ->capture_default_str();
        sub->add_option("--kv-policy", a->kv_policy,
                        "GQA: rewind a shared K/V block when all or any of its heads are")
            ->capture_default_str();
        add_unit_option(sub, *a);
        sub->add_option("--k", a->k, "Heads (experts) per set (default: a quarter of them)");
        sub->add_option("--seeds", a->seeds, "Random sets matched to each of the two sets")
            ->capture_default_str();
        sub->add_option("--seed", a->seed, "First seed of the random sets")
            ->capture_default_str()
            ->check(unsigned_seed());
        on_run(sub, [a] {
            if (a->references.size() > 2) throw InputError("--reference: give at most two reference models");
            if (!a->references.empty()) a->reference = a->references[0];
            if (a->references.size() == 2) a->second_reference = a->references[1];
            const auto config = sweep::sweep_config(*a, sweep::Kind::validate);
            auto open = [](const std::string& spec) {
                return spec.empty() ? std::nullopt : std::optional(formats::open_checkpoint(spec));
            };
            return print_outputs(sweep::sweep_validate(
                config, sweep::validate_sweep(*a, formats::open_checkpoint(a->base),
                                              formats::open_checkpoint(a->model), open(a->reference),
                                              open(a->second_reference))));
        });
    }
    {
        auto a = std::make_shared<SweepArgs>();
        auto* sub = add_sweep_sub(sweep, "truncate",
                                  "Truncation curve over the fraction of delta singular values kept", *a);
        sub->add_option("--base", a->base, "The base (pre-trained) checkpoint")->required();
        sub->add_option("--model", a->model, "The CPT checkpoint")->required();
        sub->add_option("--keeps", a->keeps, "Fractions kept: START:STOP:STEP or a list")
            ->capture_default_str();
        sub->add_flag("--per-head", a->per_head, "Truncate each head block of the attention projections");
        on_run(sub, [a] {
            const auto config = sweep::sweep_config(*a, sweep::Kind::truncate);
            return print_outputs(
                sweep::sweep_truncate(config, sweep::truncate_sweep(*a, formats::open_checkpoint(a->base),
                                                                    formats::open_checkpoint(a->model))));
        });
    }
    {
        auto a = std::make_shared<SweepArgs>();
        auto* sub = add_sweep_sub(sweep, "interpolate", "Interpolation curve between two checkpoints", *a);
        sub->add_option("models", a->pair, "A and B")->required()->expected(2);
        sub->add_option("--omegas", a->omegas, "Weights of B: START:STOP:STEP or a list")
            ->capture_default_str();
        on_run(sub, [a] {
            a->a = a->pair[0], a->b = a->pair[1];
            const auto config = sweep::sweep_config(*a, sweep::Kind::interpolate);
            return print_outputs(
                sweep::sweep_interpolate(config, sweep::interpolate_sweep(*a, formats::open_checkpoint(a->a),
                                                                          formats::open_checkpoint(a->b))));
        });
    }
}

}  // namespace diffract::cli
