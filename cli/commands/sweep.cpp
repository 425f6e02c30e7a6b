// diffract sweep rewind|truncate|interpolate|rewind-each ... --eval 'CMD {model}' --out DIR: a grid of
// edited candidates scored by the user's evaluation (see include/diffract/sweep/sweep.hpp, docs/edit.md).
#include <sstream>

#include <fmt/format.h>

#include "commands/commands.hpp"
#include "commands/edit_common.hpp"
#include "commands/run_options.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/parallel.hpp"
#include "diffract/sweep/sweep.hpp"

namespace diffract::cli {
namespace {

struct SweepArgs {
    std::string out, eval, select_eval, report_eval, score_key;
    bool keep = false;
    std::string max_shard_size = "5G";
    RunArgs run;
    // rewind / rewind-each
    std::string base, model, reference, orders = "importance,random", scale_scope = "global",
                                        kv_policy = "all";
    int seeds = 5;
    std::uint64_t seed = 0;
    std::string fractions = "0:1:0.1";
    // truncate
    std::string keeps = "0:1:0.1";
    bool per_head = false;
    // interpolate
    std::vector<std::string> pair;
    std::string omegas = "0:1:0.1";
};

sweep::SweepConfig config_of(const SweepArgs& a, const std::string& kind, nlohmann::json fingerprint) {
    sweep::SweepConfig c;
    c.out_dir = a.out;
    c.eval = {a.eval, a.score_key};
    c.select_eval = {a.select_eval, a.score_key};
    c.report_eval = {a.report_eval, a.score_key};
    c.keep = a.keep;
    c.quiet = a.run.quiet;
    fingerprint["sweep"] = kind;
    fingerprint["eval"] = a.eval;
    fingerprint["select_eval"] = a.select_eval;
    fingerprint["report_eval"] = a.report_eval;
    fingerprint["score_key"] = a.score_key;
    fingerprint["roles"] = a.run.roles;
    fingerprint["layers"] = a.run.layers;
    fingerprint["match"] = a.run.match;
    fingerprint["exclude"] = a.run.exclude;
    c.fingerprint = std::move(fingerprint);
    return c;
}

edit::EditCommon common_of(const SweepArgs& a) { return to_edit_common(a.run, a.per_head, a.max_shard_size); }

sweep::RewindSweep rewind_of(const SweepArgs& a) {
    sweep::RewindSweep w;
    w.base = a.base, w.model = a.model, w.reference = a.reference;
    w.orders.clear();
    std::istringstream in(a.orders);
    for (std::string o; std::getline(in, o, ',');)
        if (!o.empty()) w.orders.push_back(analysis::parse_head_order(o));
    if (w.orders.empty()) throw InputError("--orders: expected at least one ordering");
    if (a.seeds < 1) throw InputError(fmt::format("--seeds: expected at least 1, found {}", a.seeds));
    w.seeds = a.seeds;
    w.first_seed = a.seed;
    w.scope = analysis::parse_scale_scope(a.scale_scope);
    w.kv = edit::parse_kv_policy(a.kv_policy);
    w.fractions = edit::parse_grid(a.fractions, "--fractions");
    w.common = common_of(a);
    w.run = to_run_options(a.run);
    w.run.progress = false;
    return w;
}

nlohmann::json rewind_fingerprint(const SweepArgs& a, bool each) {
    nlohmann::json f{{"base", a.base},
                     {"model", a.model},
                     {"reference", a.reference},
                     {"kv", a.kv_policy},
                     {"scope", a.scale_scope}};
    if (!each)
        f.update({{"orders", a.orders}, {"seeds", a.seeds}, {"seed", a.seed}, {"fractions", a.fractions}});
    return f;
}

// Options shared by every sweep: evaluation, output, candidates, run and selection.
CLI::App* add_sweep_sub(CLI::App* sweep, const std::string& name, const std::string& help, SweepArgs& a) {
    auto* sub = sweep->add_subcommand(name, help);
    sub->add_option("--out", a.out, "Output directory (curve.csv, summary.json, sweep_state.jsonl)")
        ->required();
    sub->add_option("--eval", a.eval, "Evaluation command; {model} is replaced by the candidate's path");
    sub->add_option("--select-eval", a.select_eval, "Evaluation that picks the best x");
    sub->add_option("--report-eval", a.report_eval,
                    "Evaluation reported at the x the select evaluation picked");
    sub->add_option("--score-key", a.score_key,
                    "Read the score from this JSON field of stdout (dotted path)");
    sub->add_flag("--keep", a.keep, "Keep the candidates (in DIR/candidates/)");
    sub->add_option("--max-shard-size", a.max_shard_size, "Largest safetensors shard of a candidate")
        ->capture_default_str();
    add_run_options(sub, a.run);
    return sub;
}

void add_rewind_options(CLI::App* sub, SweepArgs& a) {
    sub->add_option("--base", a.base, "The base (pre-trained) checkpoint")->required();
    sub->add_option("--model", a.model, "The CPT checkpoint")->required();
    sub->add_option("--reference", a.reference, "Reference model of the head-importance score");
    sub->add_option("--scale-scope", a.scale_scope, "Importance scaling: global, layer or projection")
        ->capture_default_str();
    sub->add_option("--kv-policy", a.kv_policy,
                    "GQA: rewind a shared K/V block when all or any of its heads are")
        ->capture_default_str();
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
        sub->add_option("--seed", a->seed, "First seed of the random orderings")->capture_default_str();
        sub->add_option("--fractions", a->fractions, "Fractions of heads rewound: START:STOP:STEP or a list")
            ->capture_default_str();
        on_run(sub, [a] {
            sweep::sweep_rewind(config_of(*a, "rewind", rewind_fingerprint(*a, false)), rewind_of(*a));
            return 0;
        });
    }
    {
        auto a = std::make_shared<SweepArgs>();
        auto* sub = add_sweep_sub(sweep, "rewind-each", "Rewind one head at a time: heads_effect.csv", *a);
        add_rewind_options(sub, *a);
        on_run(sub, [a] {
            sweep::sweep_rewind_each(config_of(*a, "rewind-each", rewind_fingerprint(*a, true)),
                                     rewind_of(*a));
            return 0;
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
            sweep::TruncateSweep w{a->base, a->model, edit::parse_grid(a->keeps, "--keeps"), common_of(*a)};
            nlohmann::json f{
                {"base", a->base}, {"model", a->model}, {"keeps", a->keeps}, {"per_head", a->per_head}};
            sweep::sweep_truncate(config_of(*a, "truncate", f), w);
            return 0;
        });
    }
    {
        auto a = std::make_shared<SweepArgs>();
        auto* sub = add_sweep_sub(sweep, "interpolate", "Interpolation curve between two checkpoints", *a);
        sub->add_option("models", a->pair, "A and B")->required()->expected(2);
        sub->add_option("--omegas", a->omegas, "Weights of B: START:STOP:STEP or a list")
            ->capture_default_str();
        on_run(sub, [a] {
            sweep::InterpolateSweep w{a->pair[0], a->pair[1], edit::parse_grid(a->omegas, "--omegas"),
                                      common_of(*a)};
            nlohmann::json f{{"a", a->pair[0]}, {"b", a->pair[1]}, {"omegas", a->omegas}};
            sweep::sweep_interpolate(config_of(*a, "interpolate", f), w);
            return 0;
        });
    }
}

}  // namespace diffract::cli
