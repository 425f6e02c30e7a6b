#include "diffract/sweep/sweep_options.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/core/split_list.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/formats/lora_adapter.hpp"
#include "diffract/run/options.hpp"
#include "diffract/sweep/score_direction.hpp"

namespace diffract::sweep {
namespace {

// A rewind sweep's unit, in its fingerprint only for experts: journals of head sweeps from before
// --unit still resume.
void add_unit(const SweepOptions& o, nlohmann::json& f) {
    if (const auto unit = edit::rewind_unit_of(o.unit, o.run.experts); unit != edit::RewindUnit::heads)
        f["unit"] = std::string(name_of(edit::kRewindUnitNames, unit));
}

// What each kind's journal fingerprint holds beside the evaluations and the selection: its own inputs.
nlohmann::json rewind_models(const SweepOptions& o) {
    nlohmann::json f{{"base", o.base},
                     {"model", o.model},
                     {"reference", o.reference},
                     {"kv", o.kv_policy},
                     {"scope", o.scale_scope}};
    add_unit(o, f);
    return f;
}

nlohmann::json rewind_inputs(const SweepOptions& o) {
    auto f = rewind_models(o);
    f.update({{"orders", o.orders}, {"seeds", o.seeds}, {"seed", o.seed}, {"fractions", o.fractions}});
    return f;
}

nlohmann::json validate_inputs(const SweepOptions& o) {
    nlohmann::json f{
        {"base", o.base},
        {"model", o.model},
        {"reference", o.reference},
        {"second_reference", o.second_reference},
        {"kv", o.kv_policy},
        {"scope", o.scale_scope},
        {"k", o.k},
        {"seeds", o.seeds},
        {"seed", o.seed},
        {"direction", direction_name(required_lower_is_better(o.direction, o.score_key, "validate"))}};
    add_unit(o, f);
    return f;
}

nlohmann::json truncate_inputs(const SweepOptions& o) {
    return {{"base", o.base}, {"model", o.model}, {"keeps", o.keeps}, {"per_head", o.per_head}};
}

nlohmann::json interpolate_inputs(const SweepOptions& o) {
    return {{"a", o.a}, {"b", o.b}, {"omegas", o.omegas}};
}

// Indexed by Kind, in kKinds' order.
using KindInputs = nlohmann::json (*)(const SweepOptions&);
constexpr std::array<std::pair<Kind, KindInputs>, 5> kKindInputs{{{Kind::rewind, rewind_inputs},
                                                                  {Kind::rewind_each, rewind_models},
                                                                  {Kind::validate, validate_inputs},
                                                                  {Kind::truncate, truncate_inputs},
                                                                  {Kind::interpolate, interpolate_inputs}}};
static_assert([] {
    for (std::size_t i = 0; i < kKindInputs.size(); ++i)
        if (kKindInputs[i].first != kKinds[i].kind) return false;
    return true;
}());

}  // namespace

SweepConfig sweep_config(const SweepOptions& o, Kind kind) {
    if (o.out.empty()) throw InputError("--out: expected an output directory");
    // Before anything is written (candidates are built inside --out).
    std::vector<std::string> inputs{run::resolved_store_path(o.run.store)};
    for (const auto* spec : {&o.base, &o.model, &o.reference, &o.second_reference, &o.a, &o.b}) {
        if (spec->empty()) continue;
        const auto location = formats::split_model_name(*spec).second;
        inputs.push_back(location);
        // BASE+ADAPTER: both directories are inputs.
        if (auto [base, adapter] = formats::split_lora_spec(location); !adapter.empty())
            inputs.insert(inputs.end(), {base, adapter});
    }
    check_output_path(o.out, inputs);
    check_output_kind(o.out, OutputKind::directory);
    SweepConfig c;
    c.out_dir = o.out;
    if (!(o.eval_timeout >= 0) || !std::isfinite(o.eval_timeout))
        throw InputError(
            fmt::format("--eval-timeout: expected seconds >= 0 (0: no limit), found {}", o.eval_timeout));
    // The timeout is not part of the journal's fingerprint: a sweep may resume with another.
    c.eval = {o.eval, o.score_key, o.python, o.eval_timeout};
    c.select_eval = {o.select_eval, o.score_key, o.python, o.eval_timeout};
    c.report_eval = {o.report_eval, o.score_key, o.python, o.eval_timeout};
    c.keep = o.keep;
    c.quiet = o.run.quiet;
    c.max_candidates = edit::check_max_candidates(o.max_candidates);
    // One direction rule (score_direction.hpp): validate judges every head by it, and a sweep that picks
    // its best x with --select-eval needs it; otherwise it is written where known.
    const bool picks = !o.select_eval.empty() && !o.report_eval.empty();
    c.lower_is_better =
        kind == Kind::validate ? required_lower_is_better(o.direction, o.score_key, "sweep validate")
        : picks ? required_lower_is_better(o.direction, o.score_key, "picking the best x with --select-eval")
                : score_lower_is_better(o.direction, o.score_key);
    c.fingerprint = kKindInputs[static_cast<std::size_t>(kind)].second(o);
    c.fingerprint.update({{"sweep", std::string(kind_name(kind))},
                          {"eval", o.eval},
                          {"select_eval", o.select_eval},
                          {"report_eval", o.report_eval},
                          {"score_key", o.score_key},
                          {"roles", o.run.roles},
                          {"layers", o.run.layers},
                          {"match", o.run.match},
                          {"exclude", o.run.exclude}});
    // Only when given, so that the fingerprints of sweeps from before these flags still match.
    if (!o.run.experts.empty()) c.fingerprint["experts"] = o.run.experts;
    if (!o.run.components.empty()) c.fingerprint["components"] = o.run.components;
    return c;
}

namespace {

// The edit options of a sweep's candidates (its selection, --per-head, --max-shard-size, --device).
edit::EditCommon edit_common_of(const SweepOptions& o) {
    edit::EditCommonText text;
    static_cast<analysis::SelectionText&>(text) = o.run;
    text.max_shard_size = o.max_shard_size, text.per_head = o.per_head, text.device = o.run.device;
    return edit::parse_edit_common(text);
}

// What every rewind sweep takes: the models, the head ranking's scope, the K/V policy, the edit and the
// run options (the orderings, seeds and fractions are rewind's own).
RewindSweep rewind_common(const SweepOptions& o, formats::Checkpoint base, formats::Checkpoint model,
                          std::optional<formats::Checkpoint> reference) {
    RewindSweep w;
    w.base = std::move(base), w.model = std::move(model), w.reference = std::move(reference);
    w.unit = edit::rewind_unit_of(o.unit, o.run.experts);
    w.scope = analysis::parse_scale_scope(o.scale_scope);
    w.kv = edit::parse_kv_policy(o.kv_policy);
    w.common = edit_common_of(o);
    w.run = run::parse_run_options(o.run);
    w.run.progress = false;
    return w;
}

}  // namespace

RewindSweep rewind_sweep(const SweepOptions& o, formats::Checkpoint base, formats::Checkpoint model,
                         std::optional<formats::Checkpoint> reference) {
    std::vector<analysis::HeadOrder> orders;
    for (const auto& order : split_list(o.orders))
        orders.push_back(analysis::parse_head_order(order, "--orders"));
    if (orders.empty()) throw InputError("--orders: expected at least one ordering");
    if (o.seeds < 1) throw InputError(fmt::format("--seeds: expected at least 1, found {}", o.seeds));
    RewindSweep w = rewind_common(o, std::move(base), std::move(model), std::move(reference));
    w.orders = std::move(orders);
    w.seeds = o.seeds;
    w.first_seed = o.seed;
    // Bounded here (rewind-each ignores the fractions); sweep_rewind counts orderings x seeds x
    // fractions against config.max_candidates before making any candidate.
    w.fractions =
        edit::parse_grid(o.fractions, "--fractions",
                         std::max(edit::check_max_candidates(o.max_candidates), edit::kDefaultMaxCandidates));
    return w;
}

ValidateSweep validate_sweep(const SweepOptions& o, formats::Checkpoint base, formats::Checkpoint model,
                             std::optional<formats::Checkpoint> reference,
                             std::optional<formats::Checkpoint> second_reference) {
    if (o.k < 0)
        throw InputError(fmt::format("--k: expected a number of heads >= 1 (0: a quarter), found {}", o.k));
    if (o.seeds < 0) throw InputError(fmt::format("--seeds: expected at least 0, found {}", o.seeds));
    ValidateSweep v;
    v.rewind = rewind_common(o, std::move(base), std::move(model), std::move(reference));
    v.second_reference = std::move(second_reference);
    v.k = o.k, v.seeds = o.seeds, v.first_seed = o.seed;
    v.lower_is_better = required_lower_is_better(o.direction, o.score_key, "sweep validate");
    return v;
}

TruncateSweep truncate_sweep(const SweepOptions& o, formats::Checkpoint base, formats::Checkpoint model) {
    return {std::move(base), std::move(model),
            edit::parse_grid(o.keeps, "--keeps", edit::check_max_candidates(o.max_candidates)),
            edit_common_of(o)};
}

InterpolateSweep interpolate_sweep(const SweepOptions& o, formats::Checkpoint a, formats::Checkpoint b) {
    return {std::move(a), std::move(b),
            edit::parse_grid(o.omegas, "--omegas", edit::check_max_candidates(o.max_candidates)),
            edit_common_of(o)};
}

}  // namespace diffract::sweep
