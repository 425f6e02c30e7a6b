// analyze, compare and generate with the CLI's options; results as columns (dicts of lists).
#include <cmath>
#include <optional>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "diffract/analysis/analyze.hpp"
#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/compare.hpp"
#include "diffract/analysis/custom_fields.hpp"
#include "diffract/analysis/fit_status.hpp"
#include "diffract/analysis/option_values.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/parallel.hpp"
#include "diffract/formats/memory_checkpoint.hpp"
#include "diffract/synth/synthetic_family.hpp"
#include "interruptible.hpp"

namespace diffract::python {
namespace {

struct RunArgs {
    int threads = 0;
    std::string max_memory, store, device = "cpu";
    nb::object progress = nb::none();  // None, or report(done, total, label) (progress_sink)
    std::string roles, layers, match, exclude;
};

analysis::RunOptions run_options(const RunArgs& a) {
    const bool progress = !a.progress.is_none();
    auto run = analysis::parse_run_options(
        {a.threads, a.max_memory, a.store, a.device, !progress, a.roles, a.layers, a.match, a.exclude});
    run.progress_sink = progress_sink(a.progress);
    return run;
}

// Model arguments as specs; opened checkpoints are registered for the duration of the call.
struct Specs {
    std::vector<std::unique_ptr<formats::ScopedRegistration>> registrations;
    std::string add(const ModelArg& arg, bool memory_allowed) {
        if (const auto* s = std::get_if<std::string>(&arg)) return *s;
        const auto& c = *std::get<std::shared_ptr<PyCheckpoint>>(arg);
        if (!memory_allowed) {
            if (c.spec.empty())
                throw_input_error(c.ck->path, "",
                                  "in-memory models cannot be compared yet (save them as safetensors)");
            return c.ck->name + "=" + formats::split_model_name(c.spec).second;
        }
        registrations.push_back(std::make_unique<formats::ScopedRegistration>(*c.ck));
        return c.ck->name + "=" + registrations.back()->spec();
    }
};

nb::object optional_int(const std::optional<int>& v) { return v ? nb::cast(*v) : nb::none(); }

// Columns of the result rows: identity columns, then one per field.
template <typename Row>
nb::dict columns(const std::vector<Row>& rows, const std::vector<std::string>& fields, bool with_base) {
    nb::list model, base, tensor, layer, role, head, nrows, ncols, nonfinite;
    std::vector<nb::list> values(fields.size());
    for (const auto& r : rows) {
        model.append(r.model);
        if constexpr (requires { r.base; }) base.append(r.base);
        tensor.append(r.tensor);
        layer.append(optional_int(r.layer));
        role.append(r.role);
        head.append(optional_int(r.head));
        nrows.append(r.rows);
        ncols.append(r.cols);
        nonfinite.append(r.nonfinite_count);
        for (std::size_t f = 0; f < fields.size(); ++f) {
            auto it = r.values.find(fields[f]);
            const double v = it == r.values.end() ? std::nan("") : it->second;
            if (analysis::is_status_field(fields[f]))  // names, as the CSVs write them
                values[f].append(std::string(analysis::fit_status_name(v)));
            else
                values[f].append(v);
        }
    }
    nb::dict d;
    d["model"] = model;
    if (with_base) d["base"] = base;
    d["tensor"] = tensor;
    d["layer"] = layer;
    d["role"] = role;
    d["head"] = head;
    d["rows"] = nrows;
    d["cols"] = ncols;
    d["nonfinite_count"] = nonfinite;
    for (std::size_t f = 0; f < fields.size(); ++f) d[fields[f].c_str()] = values[f];
    return d;
}

nb::dict analyze(const std::vector<ModelArg>& models, const std::string& metrics, bool heads,
                 const std::string& precision, const std::string& svd_route, std::int64_t seed,
                 int min_fit_size, int alpha_ci, std::uint64_t alpha_ci_seed, int null_draws,
                 const std::string& convention, const RunArgs& run, const std::string& out) {
    Specs specs;
    analysis::AnalyzeOptions o;
    o.kernel.min_fit_size = min_fit_size;
    o.kernel.alpha_ci_draws = alpha_ci;
    o.kernel.alpha_ci_seed = alpha_ci_seed;
    o.kernel.null_draws = null_draws;
    o.convention = analysis::parse_convention(convention);
    for (const auto& m : models) o.models.push_back(specs.add(m, true));
    o.metrics = analysis::resolve_metrics_with_custom(metrics);
    o.heads = heads;
    o.kernel.precision = analysis::parse_precision(precision);
    o.kernel.route = analysis::parse_svd_route(svd_route);
    o.kernel.rand_seed = seed;
    o.run = run_options(run);
    o.run.out = out;
    const auto r = run_interruptible([&] {
        auto result = analysis::analyze(o);
        if (!out.empty()) analysis::write_analyze_csvs(result, out);
        return result;
    });
    nb::dict d;
    d["fields"] = nb::cast(r.fields);
    d["rows"] = columns(r.rows, r.fields, false);
    std::vector<std::string> agg_fields;
    for (const auto& f : analysis::field_catalog())
        if (f.level == analysis::Level::in_model) agg_fields.emplace_back(f.name);
    nb::dict agg;
    nb::list names;
    std::vector<nb::list> agg_values(agg_fields.size());
    for (const auto& [name, values] : r.aggregates) {
        names.append(name);
        for (std::size_t f = 0; f < agg_fields.size(); ++f) {
            auto it = values.find(agg_fields[f]);
            agg_values[f].append(it == values.end() ? std::nan("") : it->second);
        }
    }
    agg["model"] = names;
    for (std::size_t f = 0; f < agg_fields.size(); ++f) agg[agg_fields[f].c_str()] = agg_values[f];
    d["aggregates"] = agg;
    d["computed"] = r.computed;
    d["reused"] = r.reused;
    d["warnings"] = nb::cast(r.warnings);
    return d;
}

nb::dict compare(const ModelArg& base, const std::vector<ModelArg>& models,
                 const std::optional<ModelArg>& reference, int top_k, const std::string& scale_scope,
                 const std::string& order, std::uint64_t seed, const std::string& precision,
                 const std::string& svd_route, bool heads, bool allow_partial, const RunArgs& run,
                 const std::string& out) {
    Specs specs;
    analysis::CompareOptions o;
    o.base = specs.add(base, true);
    for (const auto& m : models) o.models.push_back(specs.add(m, true));
    if (reference) o.reference = specs.add(*reference, true);
    o.top_k = top_k;
    o.ranking.scope = analysis::parse_scale_scope(scale_scope);
    o.ranking.order = analysis::parse_head_order(order);
    o.ranking.seed = seed;
    o.precision = analysis::parse_precision(precision);
    o.route = analysis::parse_svd_route(svd_route);
    o.heads = heads;
    o.allow_partial = allow_partial;
    o.run = run_options(run);
    o.run.out = out;
    const auto r = run_interruptible([&] {
        auto result = analysis::compare(o);
        if (!out.empty()) analysis::write_compare_csvs(result, out);
        return result;
    });
    nb::dict d;
    d["rows"] = columns(r.rows, analysis::compare_fields(), true);
    // heads.csv's columns.
    const char* names[] = {"model",
                           "reference",
                           "layer",
                           "head",
                           "kv_head",
                           "kv_group_size",
                           "update_norm",
                           "q_update_norm",
                           "k_update_norm",
                           "v_update_norm",
                           "o_update_norm",
                           "ref_update_norm",
                           "ref_q_update_norm",
                           "ref_k_update_norm",
                           "ref_v_update_norm",
                           "ref_o_update_norm",
                           "importance",
                           "agreement",
                           "pl_ks",
                           "scale_scope",
                           "order",
                           "seed",
                           "rank"};
    std::vector<nb::list> cols(std::size(names));
    for (const auto& h : r.heads) {
        std::size_t c = 0;
        cols[c++].append(h.model);
        cols[c++].append(h.reference);
        cols[c++].append(h.layer);
        cols[c++].append(h.head);
        cols[c++].append(h.kv_head);
        cols[c++].append(h.kv_group_size);
        cols[c++].append(h.ranked.update_norm);
        for (double v : h.domain.block_norm) cols[c++].append(v);
        cols[c++].append(h.ranked.ref_update_norm);
        for (double v : h.ref.block_norm) cols[c++].append(v);
        cols[c++].append(h.ranked.importance);
        cols[c++].append(h.domain.agreement);
        cols[c++].append(h.domain.pl_ks);
        cols[c++].append(std::string(analysis::scale_scope_name(r.ranking.scope)));
        cols[c++].append(std::string(analysis::head_order_name(r.ranking.order)));
        cols[c++].append(r.ranking.seed);
        cols[c++].append(h.ranked.rank);
    }
    nb::dict hd;
    for (std::size_t c = 0; c < std::size(names); ++c) hd[names[c]] = cols[c];
    d["heads"] = hd;
    nb::dict sk;
    nb::list sm, st, sb, sr;
    for (const auto& s : r.skipped)
        sm.append(s.model), st.append(s.tensor), sb.append(s.block), sr.append(s.reason);
    sk["model"] = sm;
    sk["tensor"] = st;
    sk["block"] = sb;
    sk["reason"] = sr;
    d["skipped"] = sk;
    d["computed"] = r.computed;
    d["reused"] = r.reused;
    d["warnings"] = nb::cast(r.warnings);
    return d;
}

void generate(const std::string& out, int layers, int hidden, int heads, int kv_heads, int intermediate,
              int vocab, const std::vector<std::string>& domains, const std::string& reference,
              int domain_heads, int generic_heads, const std::string& dtype, double shard_mb,
              std::uint64_t seed) {
    synth::FamilyOptions o;
    o.layers = layers, o.hidden = hidden, o.heads = heads, o.kv_heads = kv_heads,
    o.intermediate = intermediate;
    o.vocab = vocab, o.domains = domains, o.reference = reference, o.domain_heads_per_layer = domain_heads;
    o.generic_heads_per_layer = generic_heads, o.seed = seed;
    const auto dt = dtype_from_name(dtype);
    if (!dt || (*dt != DType::BF16 && *dt != DType::F16 && *dt != DType::F32))
        throw InputError("--dtype: expected BF16, F16 or F32, found '" + dtype + "'");
    o.dtype = *dt;
    o.max_shard_bytes = static_cast<std::uint64_t>(shard_mb * 1e6);
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
        .def_rw("match", &RunArgs::match)
        .def_rw("exclude", &RunArgs::exclude);
    m.def("analyze", &analyze, nb::arg("models"), nb::arg("metrics"), nb::arg("heads"), nb::arg("precision"),
          nb::arg("svd_route"), nb::arg("seed"), nb::arg("min_fit_size"), nb::arg("alpha_ci"),
          nb::arg("alpha_ci_seed"), nb::arg("null_draws"), nb::arg("convention"), nb::arg("run"),
          nb::arg("out"));
    m.def("compare", &compare, nb::arg("base"), nb::arg("models"), nb::arg("reference").none(),
          nb::arg("top_k"), nb::arg("scale_scope"), nb::arg("order"), nb::arg("seed"), nb::arg("precision"),
          nb::arg("svd_route"), nb::arg("heads"), nb::arg("allow_partial"), nb::arg("run"), nb::arg("out"));
    m.def("generate", &generate, nb::arg("out"), nb::arg("layers"), nb::arg("hidden"), nb::arg("heads"),
          nb::arg("kv_heads"), nb::arg("intermediate"), nb::arg("vocab"), nb::arg("domains"),
          nb::arg("reference"), nb::arg("domain_heads"), nb::arg("generic_heads"), nb::arg("dtype"),
          nb::arg("shard_mb"), nb::arg("seed"));
    m.def("catalog", &catalog);
    m.def(
        "resolve_metrics",
        [](const std::string& spec) { return analysis::resolve_metrics_with_custom(spec); }, nb::arg("spec"));
}

}  // namespace diffract::python
