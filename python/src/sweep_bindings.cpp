// sweep rewind|rewind-each|validate|truncate|interpolate with the CLI's options (sweep/sweep.hpp). The
// library writes DIR/curve.csv (heads_effect.csv for rewind-each), DIR/summary.json and the resumable
// journal, and returns what it wrote: the Python layer (diffract/sweep.py) gets the table and the summary
// from here, not from the files.
//
// The options go through the library's sweep_options (as the CLI's do), so that a sweep started from
// the CLI resumes from Python and the other way round. An evaluation may be a Python callable instead
// of a command: the engine calls it from the sweep's thread, under the GIL.
#include <cstdio>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>

#include "bindings.hpp"
#include "diffract/core/error.hpp"
#include "diffract/run/analyze.hpp"
#include "diffract/sweep/sweep_options.hpp"
#include "interruptible.hpp"
#include "table_columns.hpp"

namespace diffract::python {
namespace {

// The library's sweep options (the CLI's SweepArgs inherits them too; the package passes sys.executable
// as `python`), plus what only Python has: callables evaluated in this process (None: the command
// runs; the command then describes the callable for the journal's fingerprint) and the progress sink.
struct SweepArgs : sweep::SweepOptions {
    nb::object eval_fn = nb::none(), select_eval_fn = nb::none(), report_eval_fn = nb::none();
    nb::object progress = nb::none();  // None, or report(done, total, label) (progress_sink)
};

// `fn` as the engine's in-process evaluator: called with the candidate's directory as a pathlib.Path,
// it returns the score. An exception it raises stops the sweep and reaches the caller unchanged.
void attach(sweep::EvalCommand& e, const nb::object& fn) {
    if (fn.is_none()) return;
    auto owner = keep_alive(fn);
    e.in_process = [owner](const std::string& path) {
        nb::gil_scoped_acquire acquire;
        nb::handle callable(static_cast<PyObject*>(const_cast<void*>(owner.get())));
        const nb::object value = callable(nb::module_::import_("pathlib").attr("Path")(path));
        const double v = PyFloat_AsDouble(value.ptr());
        if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
        return v;
    };
}

// The sweep's configuration, with the callables of `a` as its evaluations.
sweep::SweepConfig config_of(const sweep::SweepOptions& o, sweep::Kind kind, const SweepArgs& a) {
    auto config = sweep::sweep_config(o, kind);
    attach(config.eval, a.eval_fn);
    attach(config.select_eval, a.select_eval_fn);
    attach(config.report_eval, a.report_eval_fn);
    config.progress = progress_sink(a.progress);
    return config;
}

std::string spec_of(const ModelArg& arg) {
    if (const auto* s = std::get_if<std::string>(&arg)) return *s;
    const auto& c = *std::get<std::shared_ptr<PyCheckpoint>>(arg);
    if (c.spec.empty())
        throw_input_error(c.ck->path, "", "in-memory models cannot be swept (save them as safetensors)");
    return c.spec;  // what opened it: the same journal fingerprint as the CLI given that spec
}

// What the sweep wrote: {"table": curve.csv's (heads_effect.csv's) columns, "summary": summary.json's text}.
nb::dict outputs_of(const sweep::SweepOutputs& o) {
    // What the sweep returned to say goes to stderr, as the CLI prints it.
    for (const auto& w : o.warnings) fmt::print(stderr, "diffract: warning: {}\n", w);
    for (const auto& line : o.lines) fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
    nb::dict d;
    d["table"] = columns_of(o.table);
    d["summary"] = o.summary;
    return d;
}

// The library's options of the arguments (the Python-only members left behind).
sweep::SweepOptions options_of(const SweepArgs& a) { return static_cast<const sweep::SweepOptions&>(a); }

// A run option of SweepArgs::run as a flat attribute (a.threads, a.roles, ...), as the CLI spells it.
template <typename T, typename Owner, T Owner::*member>
void run_attribute(nb::class_<SweepArgs>& c, const char* name) {
    c.def_prop_rw(
        name, [](const SweepArgs& a) -> T { return a.run.*member; },
        [](SweepArgs& a, T v) { a.run.*member = std::move(v); });
}

sweep::SweepOptions rewind_options(const ModelArg& base, const ModelArg& model,
                                   const std::optional<ModelArg>& reference, const std::string& scale_scope,
                                   const std::string& kv_policy, const SweepArgs& a) {
    auto o = options_of(a);
    o.base = spec_of(base), o.model = spec_of(model);
    if (reference) o.reference = spec_of(*reference);
    o.scale_scope = scale_scope, o.kv_policy = kv_policy;
    return o;
}

// The rewind sweeps' parameters with the checkpoints the arguments name (opened, or opened here).
sweep::RewindSweep rewind_of(const sweep::SweepOptions& o, const ModelArg& base, const ModelArg& model,
                             const std::optional<ModelArg>& reference) {
    std::optional<formats::Checkpoint> ref;
    if (reference) ref = *opened(*reference);
    return sweep::rewind_sweep(o, *opened(base), *opened(model), std::move(ref));
}

nb::dict rewind(const ModelArg& base, const ModelArg& model, const std::optional<ModelArg>& reference,
                const std::string& orders, int seeds, std::uint64_t seed, const std::string& scale_scope,
                const std::string& kv_policy, const std::string& fractions, const SweepArgs& a) {
    auto o = rewind_options(base, model, reference, scale_scope, kv_policy, a);
    o.orders = orders, o.seeds = seeds, o.seed = seed, o.fractions = fractions;
    const auto config = config_of(o, sweep::Kind::rewind, a);
    const auto w = rewind_of(o, base, model, reference);
    return outputs_of(run_interruptible([&] { return sweep::sweep_rewind(config, w); }));
}

nb::dict rewind_each(const ModelArg& base, const ModelArg& model, const std::optional<ModelArg>& reference,
                     const std::string& scale_scope, const std::string& kv_policy, const SweepArgs& a) {
    const auto o = rewind_options(base, model, reference, scale_scope, kv_policy, a);
    const auto config = config_of(o, sweep::Kind::rewind_each, a);
    const auto w = rewind_of(o, base, model, reference);
    return outputs_of(run_interruptible([&] { return sweep::sweep_rewind_each(config, w); }));
}

nb::dict validate(const ModelArg& base, const ModelArg& model, const std::optional<ModelArg>& reference,
                  const std::optional<ModelArg>& second_reference, int k, int seeds, std::uint64_t seed,
                  const std::string& direction, const std::string& scale_scope, const std::string& kv_policy,
                  const SweepArgs& a) {
    auto o = rewind_options(base, model, reference, scale_scope, kv_policy, a);
    if (second_reference) o.second_reference = spec_of(*second_reference);
    o.k = k, o.seeds = seeds, o.seed = seed;
    if (!direction.empty()) o.direction = direction;
    const auto config = config_of(o, sweep::Kind::validate, a);
    std::optional<formats::Checkpoint> ref, ref2;
    if (reference) ref = *opened(*reference);
    if (second_reference) ref2 = *opened(*second_reference);
    const auto w = sweep::validate_sweep(o, *opened(base), *opened(model), std::move(ref), std::move(ref2));
    return outputs_of(run_interruptible([&] { return sweep::sweep_validate(config, w); }));
}

nb::dict truncate(const ModelArg& base, const ModelArg& model, const std::string& keeps, const SweepArgs& a) {
    auto o = options_of(a);
    o.base = spec_of(base), o.model = spec_of(model), o.keeps = keeps;
    const auto config = config_of(o, sweep::Kind::truncate, a);
    const auto w = sweep::truncate_sweep(o, *opened(base), *opened(model));
    return outputs_of(run_interruptible([&] { return sweep::sweep_truncate(config, w); }));
}

nb::dict interpolate(const ModelArg& a_model, const ModelArg& b_model, const std::string& omegas,
                     const SweepArgs& a) {
    auto o = options_of(a);
    o.a = spec_of(a_model), o.b = spec_of(b_model), o.omegas = omegas;
    const auto config = config_of(o, sweep::Kind::interpolate, a);
    const auto w = sweep::interpolate_sweep(o, *opened(a_model), *opened(b_model));
    return outputs_of(run_interruptible([&] { return sweep::sweep_interpolate(config, w); }));
}

}  // namespace

void bind_sweeps(nb::module_& m) {
    auto args =
        nb::class_<SweepArgs>(
            m, "SweepArgs",
            "The options every sweep takes (--out, --eval, ..., the run and selection options)",
            nb::type_slots(GcSlots<SweepArgs, &SweepArgs::eval_fn, &SweepArgs::select_eval_fn,
                                   &SweepArgs::report_eval_fn, &SweepArgs::progress>::slots))
            .def(nb::init<>())
            .def_rw("out", &SweepArgs::out)
            .def_rw("eval", &SweepArgs::eval)
            .def_rw("select_eval", &SweepArgs::select_eval)
            .def_rw("report_eval", &SweepArgs::report_eval)
            .def_rw("score_key", &SweepArgs::score_key)
            .def_rw("direction", &SweepArgs::direction)
            .def_rw("python", &SweepArgs::python)
            .def_rw("eval_timeout", &SweepArgs::eval_timeout)
            .def_rw("keep", &SweepArgs::keep)
            .def_rw("max_shard_size", &SweepArgs::max_shard_size)
            .def_rw("max_candidates", &SweepArgs::max_candidates)
            .def_rw("per_head", &SweepArgs::per_head)
            .def_rw("unit", &SweepArgs::unit)
            // Read by sweep.py for its defaults, written once here (sweep::SweepOptions); each sweep sets
            // them from its own arguments.
            .def_ro("orders", &SweepArgs::orders)
            .def_ro("seeds", &SweepArgs::seeds)
            .def_ro("seed", &SweepArgs::seed)
            .def_ro("fractions", &SweepArgs::fractions)
            .def_ro("scale_scope", &SweepArgs::scale_scope)
            .def_ro("kv_policy", &SweepArgs::kv_policy)
            .def_ro("keeps", &SweepArgs::keeps)
            .def_ro("omegas", &SweepArgs::omegas)
            .def_prop_rw(
                "quiet", [](const SweepArgs& a) { return a.run.quiet != 0; },
                [](SweepArgs& a, bool quiet) { a.run.quiet = quiet ? 1 : 0; })
            .def_rw("eval_fn", &SweepArgs::eval_fn)
            .def_rw("select_eval_fn", &SweepArgs::select_eval_fn)
            .def_rw("report_eval_fn", &SweepArgs::report_eval_fn)
            .def_rw("progress", &SweepArgs::progress, "None, or a callable receiving (done, total, label)");
    run_attribute<int, run::RunOptionText, &run::RunOptionText::threads>(args, "threads");
    run_attribute<std::string, run::RunOptionText, &run::RunOptionText::max_memory>(args, "max_memory");
    run_attribute<std::string, run::RunOptionText, &run::RunOptionText::store>(args, "store");
    run_attribute<std::string, run::RunOptionText, &run::RunOptionText::device>(args, "device");
    run_attribute<std::string, analysis::SelectionText, &analysis::SelectionText::roles>(args, "roles");
    run_attribute<std::string, analysis::SelectionText, &analysis::SelectionText::layers>(args, "layers");
    run_attribute<std::string, analysis::SelectionText, &analysis::SelectionText::match>(args, "match");
    run_attribute<std::string, analysis::SelectionText, &analysis::SelectionText::exclude>(args, "exclude");
    run_attribute<std::string, analysis::SelectionText, &analysis::SelectionText::experts>(args, "experts");
    run_attribute<std::string, analysis::SelectionText, &analysis::SelectionText::components>(args,
                                                                                              "components");
    m.def("sweep_rewind", &rewind, nb::arg("base"), nb::arg("model"), nb::arg("reference").none(),
          nb::arg("orders"), nb::arg("seeds"), nb::arg("seed"), nb::arg("scale_scope"), nb::arg("kv_policy"),
          nb::arg("fractions"), nb::arg("args"));
    m.def("sweep_rewind_each", &rewind_each, nb::arg("base"), nb::arg("model"), nb::arg("reference").none(),
          nb::arg("scale_scope"), nb::arg("kv_policy"), nb::arg("args"));
    m.def("sweep_validate", &validate, nb::arg("base"), nb::arg("model"), nb::arg("reference").none(),
          nb::arg("second_reference").none(), nb::arg("k"), nb::arg("seeds"), nb::arg("seed"),
          nb::arg("direction"), nb::arg("scale_scope"), nb::arg("kv_policy"), nb::arg("args"));
    m.def("sweep_truncate", &truncate, nb::arg("base"), nb::arg("model"), nb::arg("keeps"), nb::arg("args"));
    m.def("sweep_interpolate", &interpolate, nb::arg("a"), nb::arg("b"), nb::arg("omegas"), nb::arg("args"));
}

}  // namespace diffract::python
