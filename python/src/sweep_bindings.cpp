// sweep rewind|rewind-each|truncate|interpolate with the CLI's options (sweep/sweep.hpp). The library
// writes DIR/curve.csv (heads_effect.csv for rewind-each), DIR/summary.json and the resumable journal;
// the Python layer (diffract/sweep.py) reads the results back from those files.
//
// The journal's fingerprint is built exactly as cli/commands/sweep.cpp builds it, so that a sweep
// started from the CLI resumes from Python and the other way round.
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>

#include "bindings.hpp"
#include "diffract/analysis/analyze.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/parallel.hpp"
#include "diffract/sweep/sweep.hpp"
#include "interruptible.hpp"

namespace diffract::python {
namespace {

struct SweepArgs {  // the options every sweep takes (the CLI's add_sweep_sub and add_run_options)
    std::string out, eval, select_eval, report_eval, score_key;
    bool keep = false;
    std::string max_shard_size = "5G";
    bool per_head = false;
    int threads = 0;
    std::string max_memory, store, device = "cpu";
    bool quiet = false;
    std::string roles, layers, match, exclude;
};

std::string spec_of(const ModelArg& arg) {
    if (const auto* s = std::get_if<std::string>(&arg)) return *s;
    const auto& c = *std::get<std::shared_ptr<PyCheckpoint>>(arg);
    if (c.spec.empty())
        throw_input_error(c.ck->path, "", "in-memory models cannot be swept (save them as safetensors)");
    return c.spec;  // what opened it: the same journal fingerprint as the CLI given that spec
}

sweep::SweepConfig config_of(const SweepArgs& a, const std::string& kind, nlohmann::json fingerprint) {
    if (a.out.empty()) throw InputError("--out: expected an output directory");
    sweep::SweepConfig c;
    c.out_dir = a.out;
    c.eval = {a.eval, a.score_key};
    c.select_eval = {a.select_eval, a.score_key};
    c.report_eval = {a.report_eval, a.score_key};
    c.keep = a.keep;
    c.quiet = a.quiet;
    fingerprint["sweep"] = kind;
    fingerprint["eval"] = a.eval;
    fingerprint["select_eval"] = a.select_eval;
    fingerprint["report_eval"] = a.report_eval;
    fingerprint["score_key"] = a.score_key;
    fingerprint["roles"] = a.roles;
    fingerprint["layers"] = a.layers;
    fingerprint["match"] = a.match;
    fingerprint["exclude"] = a.exclude;
    c.fingerprint = std::move(fingerprint);
    return c;
}

edit::EditCommon common_of(const SweepArgs& a) {
    edit::EditCommon c;
    c.selection = analysis::make_selection(a.roles, a.layers, a.match, a.exclude);
    c.per_head = a.per_head;
    c.max_shard_bytes = parse_size(a.max_shard_size, "--max-shard-size");
    c.device = a.device;
    return c;
}

analysis::RunOptions run_of(const SweepArgs& a) {
    analysis::RunOptions r;
    r.threads = a.threads;
    r.max_memory = a.max_memory.empty() ? 0 : parse_size(a.max_memory, "--max-memory");
    r.store_path = a.store;
    r.device = a.device;
    r.progress = false;
    r.selection = analysis::make_selection(a.roles, a.layers, a.match, a.exclude);
    return r;
}

struct RewindArgs {  // rewind and rewind-each
    std::string base, model, reference, orders = "importance,random", scale_scope = "global",
                                        kv_policy = "all", fractions = "0:1:0.1";
    int seeds = 5;
    std::uint64_t seed = 0;
};

sweep::RewindSweep rewind_of(const RewindArgs& r, const SweepArgs& a) {
    sweep::RewindSweep w;
    w.base = r.base, w.model = r.model, w.reference = r.reference;
    w.orders.clear();
    std::istringstream in(r.orders);
    for (std::string o; std::getline(in, o, ',');)
        if (!o.empty()) w.orders.push_back(analysis::parse_head_order(o));
    if (w.orders.empty()) throw InputError("--orders: expected at least one ordering");
    if (r.seeds < 1) throw InputError(fmt::format("--seeds: expected at least 1, found {}", r.seeds));
    w.seeds = r.seeds;
    w.first_seed = r.seed;
    w.scope = analysis::parse_scale_scope(r.scale_scope);
    w.kv = edit::parse_kv_policy(r.kv_policy);
    w.fractions = edit::parse_grid(r.fractions, "--fractions");
    w.common = common_of(a);
    w.run = run_of(a);
    return w;
}

nlohmann::json rewind_fingerprint(const RewindArgs& r, bool each) {
    nlohmann::json f{{"base", r.base},
                     {"model", r.model},
                     {"reference", r.reference},
                     {"kv", r.kv_policy},
                     {"scope", r.scale_scope}};
    if (!each)
        f.update({{"orders", r.orders}, {"seeds", r.seeds}, {"seed", r.seed}, {"fractions", r.fractions}});
    return f;
}

RewindArgs rewind_args(const ModelArg& base, const ModelArg& model, const std::optional<ModelArg>& reference,
                       const std::string& scale_scope, const std::string& kv_policy) {
    RewindArgs r;
    r.base = spec_of(base), r.model = spec_of(model);
    if (reference) r.reference = spec_of(*reference);
    r.scale_scope = scale_scope, r.kv_policy = kv_policy;
    return r;
}

void rewind(const ModelArg& base, const ModelArg& model, const std::optional<ModelArg>& reference,
            const std::string& orders, int seeds, std::uint64_t seed, const std::string& scale_scope,
            const std::string& kv_policy, const std::string& fractions, const SweepArgs& a) {
    auto r = rewind_args(base, model, reference, scale_scope, kv_policy);
    r.orders = orders, r.seeds = seeds, r.seed = seed, r.fractions = fractions;
    const auto config = config_of(a, "rewind", rewind_fingerprint(r, false));
    const auto w = rewind_of(r, a);
    run_interruptible([&] {
        sweep::sweep_rewind(config, w);
        return 0;
    });
}

void rewind_each(const ModelArg& base, const ModelArg& model, const std::optional<ModelArg>& reference,
                 const std::string& scale_scope, const std::string& kv_policy, const SweepArgs& a) {
    const auto r = rewind_args(base, model, reference, scale_scope, kv_policy);
    const auto config = config_of(a, "rewind-each", rewind_fingerprint(r, true));
    const auto w = rewind_of(r, a);
    run_interruptible([&] {
        sweep::sweep_rewind_each(config, w);
        return 0;
    });
}

void truncate(const ModelArg& base, const ModelArg& model, const std::string& keeps, const SweepArgs& a) {
    const sweep::TruncateSweep w{spec_of(base), spec_of(model), edit::parse_grid(keeps, "--keeps"),
                                 common_of(a)};
    const nlohmann::json f{{"base", w.base}, {"model", w.model}, {"keeps", keeps}, {"per_head", a.per_head}};
    const auto config = config_of(a, "truncate", f);
    run_interruptible([&] {
        sweep::sweep_truncate(config, w);
        return 0;
    });
}

void interpolate(const ModelArg& a_model, const ModelArg& b_model, const std::string& omegas,
                 const SweepArgs& a) {
    const sweep::InterpolateSweep w{spec_of(a_model), spec_of(b_model), edit::parse_grid(omegas, "--omegas"),
                                    common_of(a)};
    const nlohmann::json f{{"a", w.a}, {"b", w.b}, {"omegas", omegas}};
    const auto config = config_of(a, "interpolate", f);
    run_interruptible([&] {
        sweep::sweep_interpolate(config, w);
        return 0;
    });
}

}  // namespace

void bind_sweeps(nb::module_& m) {
    nb::class_<SweepArgs>(m, "SweepArgs",
                          "The options every sweep takes (--out, --eval, ..., the run and selection options)")
        .def(nb::init<>())
        .def_rw("out", &SweepArgs::out)
        .def_rw("eval", &SweepArgs::eval)
        .def_rw("select_eval", &SweepArgs::select_eval)
        .def_rw("report_eval", &SweepArgs::report_eval)
        .def_rw("score_key", &SweepArgs::score_key)
        .def_rw("keep", &SweepArgs::keep)
        .def_rw("max_shard_size", &SweepArgs::max_shard_size)
        .def_rw("per_head", &SweepArgs::per_head)
        .def_rw("threads", &SweepArgs::threads)
        .def_rw("max_memory", &SweepArgs::max_memory)
        .def_rw("store", &SweepArgs::store)
        .def_rw("device", &SweepArgs::device)
        .def_rw("quiet", &SweepArgs::quiet)
        .def_rw("roles", &SweepArgs::roles)
        .def_rw("layers", &SweepArgs::layers)
        .def_rw("match", &SweepArgs::match)
        .def_rw("exclude", &SweepArgs::exclude);
    m.def("sweep_rewind", &rewind, nb::arg("base"), nb::arg("model"), nb::arg("reference").none(),
          nb::arg("orders"), nb::arg("seeds"), nb::arg("seed"), nb::arg("scale_scope"), nb::arg("kv_policy"),
          nb::arg("fractions"), nb::arg("args"));
    m.def("sweep_rewind_each", &rewind_each, nb::arg("base"), nb::arg("model"), nb::arg("reference").none(),
          nb::arg("scale_scope"), nb::arg("kv_policy"), nb::arg("args"));
    m.def("sweep_truncate", &truncate, nb::arg("base"), nb::arg("model"), nb::arg("keeps"), nb::arg("args"));
    m.def("sweep_interpolate", &interpolate, nb::arg("a"), nb::arg("b"), nb::arg("omegas"), nb::arg("args"));
}

}  // namespace diffract::python
