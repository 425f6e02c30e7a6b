// analyze, compare, watch and generate with the CLI's options; results as columns (dicts of lists).
#include <optional>
#include <set>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/custom_fields.hpp"
#include "diffract/analysis/option_values.hpp"
#include "diffract/core/error.hpp"
#include "diffract/run/analyze.hpp"
#include "diffract/run/compare.hpp"
#include "diffract/run/tables.hpp"
#include "diffract/synth/synthetic_family.hpp"
#include "diffract/watch/watch.hpp"
#include "interruptible.hpp"
#include "table_columns.hpp"

namespace diffract::python {
namespace {

// The library's run options as the CLI spells them, plus Python's progress sink (which replaces
// --quiet: no sink, no progress display).
struct RunArgs : run::RunOptionText {
    nb::object progress = nb::none();  // None, or report(done, total, label) (progress_sink)
};

run::RunOptions run_options(const RunArgs& a) {
    auto text = static_cast<const run::RunOptionText&>(a);
    text.quiet = a.progress.is_none() ? 1 : 0;
    auto run = run::parse_run_options(text);
    run.progress_sink = progress_sink(a.progress);
    return run;
}

nb::dict analyze(const std::vector<ModelArg>& models, const std::string& metrics, bool heads,
                 bool allow_partial, const std::string& precision, const std::string& svd_route,
                 std::int64_t seed, int min_fit_size, int alpha_ci, std::uint64_t alpha_ci_seed,
                 int null_draws, int p_value_draws, const std::string& convention, const RunArgs& run,
                 const std::string& out) {
    run::AnalyzeOptions o;
    o.kernel = analysis::parse_kernel_options(
        {precision, svd_route, seed, min_fit_size, alpha_ci, alpha_ci_seed, null_draws, p_value_draws});
    o.convention = analysis::parse_convention(convention);
    for (const auto& m : models) o.models.push_back(*opened(m));
    o.metrics = analysis::resolve_metrics_with_custom(metrics);
    o.heads = heads;
    o.run = run_options(run);
    o.run.selection.allow_partial = allow_partial;
    o.run.out = out;
    const auto r = run_interruptible([&] {
        auto result = run::analyze(o);
        if (!out.empty()) run::write_analyze_csvs(result, out);
        return result;
    });
    nb::dict d;
    d["fields"] = nb::cast(r.fields);
    d["rows"] = columns_of(run::metrics_table(r));
    d["aggregates"] = columns_of(run::aggregates_table(r));
    d["computed"] = r.computed;
    d["reused"] = r.reused;
    d["warnings"] = nb::cast(r.warnings);
    return d;
}

nb::dict compare(const ModelArg& base, const std::vector<ModelArg>& models,
                 const std::optional<ModelArg>& reference, const run::CompareOptionText& options,
                 const RunArgs& run, const std::string& out) {
    run::CompareOptions o;
    o.base = *opened(base);
    for (const auto& m : models) o.models.push_back(*opened(m));
    if (reference) o.reference = *opened(*reference);
    o.run = run_options(run);
    run::apply_compare_options(options, o);
    o.run.out = out;
    const auto r = run_interruptible([&] {
        auto result = run::compare(o);
        if (!out.empty()) run::write_compare_csvs(result, out);
        return result;
    });
    nb::dict d;
    d["rows"] = columns_of(run::compare_table(r));
    d["heads"] = columns_of(run::heads_table(r));
    d["experts"] = columns_of(run::experts_table(r));
    d["expert_overlap"] = columns_of(run::expert_overlap_table(r));
    d["skipped"] = columns_of(run::skipped_table(r));
    d["findings"] = nb::cast(r.findings);
    d["computed"] = r.computed;
    d["reused"] = r.reused;
    d["warnings"] = nb::cast(r.warnings);
    return d;
}

// watch: the options as watch::WatchOptionText names them; `notice` receives each line the CLI prints.
nb::dict watch(const std::string& run_dir, const std::string& out, const std::string& base,
               const std::string& metrics, bool heads, const std::string& precision,
               const std::string& svd_route, std::int64_t seed, int min_fit_size, bool delta_only,
               bool follow, std::int64_t every, std::optional<std::int64_t> until_step, double poll,
               double settle, const watch::AlertThresholds& thresholds, const RunArgs& run,
               nb::object notice) {
    watch::WatchOptionText t;
    t.run_dir = run_dir, t.out = out, t.base = base, t.metrics = metrics, t.heads = heads;
    t.kernel.precision = precision, t.kernel.svd_route = svd_route, t.kernel.seed = seed;
    t.kernel.min_fit_size = min_fit_size;
    t.delta_only = delta_only, t.follow = follow, t.every = every, t.until_step = until_step, t.poll = poll,
    t.settle = settle;
    t.thresholds = thresholds;
    auto o = watch::parse_watch_options(t);
    o.run = run_options(run);
    o.run.out = out;
    if (!notice.is_none()) {
        auto owner = keep_alive(notice);
        o.notice = [owner](const std::string& line) {
            nb::gil_scoped_acquire acquire;
            try {
                nb::handle(static_cast<PyObject*>(const_cast<void*>(owner.get())))(line);
            } catch (nb::python_error& e) {
                e.discard_as_unraisable("diffract: the watch's notice");
            }
        };
    }
    const auto r = run_interruptible([&] { return watch::watch(o); });
    nb::dict d;
    d["checkpoints"] = columns_of(watch::checkpoints_table(r.checkpoints));
    d["metrics"] = columns_of(r.metrics);
    d["aggregates"] = columns_of(r.aggregates);
    d["compare"] = columns_of(r.compare);
    d["heads"] = columns_of(r.heads);
    d["trends"] = columns_of(watch::trends_table(r.trends));
    d["alerts"] = columns_of(watch::alerts_table(r.alerts));
    d["warnings"] = nb::cast(r.warnings);
    return d;
}

// Shape arguments are optional: the ones given override the preset's (synth::apply_preset).
void generate(const std::string& out, const std::string& preset, std::optional<int> layers,
              std::optional<int> hidden, std::optional<int> heads, std::optional<int> kv_heads,
              std::optional<int> intermediate, std::optional<int> vocab,
              const std::vector<std::string>& domains, const std::string& reference, int domain_heads,
              int generic_heads, const std::string& dtype, double shard_mb, std::uint64_t seed,
              const std::vector<std::string>& models) {
    synth::FamilyOptions o;
    std::set<std::string> given;
    auto take = [&](const char* name, const std::optional<int>& v, int& field) {
        if (v) field = *v, given.insert(name);
    };
    take("layers", layers, o.layers), take("hidden", hidden, o.hidden), take("heads", heads, o.heads);
    take("kv_heads", kv_heads, o.kv_heads), take("intermediate", intermediate, o.intermediate);
    take("vocab", vocab, o.vocab);
    synth::apply_preset(o, preset, given);
    o.domains = domains, o.reference = reference, o.domain_heads_per_layer = domain_heads;
    o.generic_heads_per_layer = generic_heads, o.seed = seed, o.only = models;
    o.dtype = synth::parse_family_dtype(dtype);
    o.max_shard_bytes = synth::family_shard_bytes(shard_mb);
    run_interruptible([&] {
        synth::generate_family(out, o);
        return 0;
    });
}

nb::dict catalog() {
    nb::list name, level, is_vector, formula, inputs, in_default;
    for (const auto& f : analysis::field_catalog()) {
        name.append(std::string(f.name));
        level.append(std::string(analysis::level_name(f.level)));
        is_vector.append(f.is_vector);
        formula.append(std::string(f.formula));
        inputs.append(std::string(f.inputs));
        in_default.append(f.in_default);
    }
    nb::dict d;
    d["name"] = name, d["level"] = level, d["is_vector"] = is_vector, d["formula"] = formula;
    d["inputs"] = inputs, d["in_default"] = in_default;
    return d;
}

}  // namespace

void bind_analysis(nb::module_& m) {
    nb::class_<RunArgs>(m, "RunArgs", "The options every computing command shares (--threads, --store, ...)",
                        nb::type_slots(GcSlots<RunArgs, &RunArgs::progress>::slots))
        .def(nb::init<>())
        .def_rw("threads", &RunArgs::threads)
        .def_rw("max_memory", &RunArgs::max_memory)
        .def_rw("store", &RunArgs::store)
        .def_rw("device", &RunArgs::device)
        .def_rw("progress", &RunArgs::progress, "None, or a callable receiving (done, total, label)")
        .def_rw("roles", &RunArgs::roles)
        .def_rw("layers", &RunArgs::layers)
        .def_rw("experts", &RunArgs::experts)
        .def_rw("components", &RunArgs::components)
        .def_rw("match", &RunArgs::match)
        .def_rw("exclude", &RunArgs::exclude);
    m.def("analyze", &analyze, nb::arg("models"), nb::arg("metrics"), nb::arg("heads"),
          nb::arg("allow_partial"), nb::arg("precision"), nb::arg("svd_route"), nb::arg("seed"),
          nb::arg("min_fit_size"), nb::arg("alpha_ci"), nb::arg("alpha_ci_seed"), nb::arg("null_draws"),
          nb::arg("p_value_draws"), nb::arg("convention"), nb::arg("run"), nb::arg("out"));
    nb::class_<run::CompareOptionText>(m, "CompareOptionText",
                                       "compare's options with their defaults (--top-k, --order, ...)")
        .def(nb::init<>())
        .def_rw("top_k", &run::CompareOptionText::top_k)
        .def_rw("scale_scope", &run::CompareOptionText::scale_scope)
        .def_rw("order", &run::CompareOptionText::order)
        .def_rw("seed", &run::CompareOptionText::seed)
        .def_rw("precision", &run::CompareOptionText::precision)
        .def_rw("svd_route", &run::CompareOptionText::svd_route)
        .def_rw("heads", &run::CompareOptionText::heads)
        .def_rw("allow_partial", &run::CompareOptionText::allow_partial)
        .def_rw("delta_only", &run::CompareOptionText::delta_only)
        .def_rw("overlap_k", &run::CompareOptionText::overlap_k);
    m.def("compare", &compare, nb::arg("base"), nb::arg("models"), nb::arg("reference").none(), nb::kw_only(),
          nb::arg("options"), nb::arg("run"), nb::arg("out"));
    nb::class_<watch::AlertThresholds>(m, "AlertThresholds", "watch's alert thresholds (--alpha-low, ...)")
        .def(nb::init<>())
        .def_rw("alpha_low", &watch::AlertThresholds::alpha_low)
        .def_rw("alpha_high", &watch::AlertThresholds::alpha_high)
        .def_rw("alpha_jump", &watch::AlertThresholds::alpha_jump)
        .def_rw("stable_rank_jump", &watch::AlertThresholds::stable_rank_jump)
        .def_rw("head_share", &watch::AlertThresholds::head_share);
    m.def("watch", &watch, nb::arg("run_dir"), nb::arg("out"), nb::arg("base"), nb::arg("metrics"),
          nb::arg("heads"), nb::arg("precision"), nb::arg("svd_route"), nb::arg("seed"),
          nb::arg("min_fit_size"), nb::arg("delta_only"), nb::arg("follow"), nb::arg("every"),
          nb::arg("until_step").none(), nb::arg("poll"), nb::arg("settle"), nb::arg("thresholds"),
          nb::arg("run"), nb::arg("notice").none());
    m.def("generate", &generate, nb::arg("out"), nb::arg("preset"), nb::arg("layers").none(),
          nb::arg("hidden").none(), nb::arg("heads").none(), nb::arg("kv_heads").none(),
          nb::arg("intermediate").none(), nb::arg("vocab").none(), nb::arg("domains"), nb::arg("reference"),
          nb::arg("domain_heads"), nb::arg("generic_heads"), nb::arg("dtype"), nb::arg("shard_mb"),
          nb::arg("seed"), nb::arg("models"));
    m.def("catalog", &catalog);
    m.def(
        "resolve_metrics",
        [](const std::string& spec) { return analysis::resolve_metrics_with_custom(spec); }, nb::arg("spec"));
}

}  // namespace diffract::python
