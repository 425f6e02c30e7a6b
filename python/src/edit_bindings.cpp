// edit rewind|truncate|transplant|permute|interpolate|merge with the CLI's options (edit/edit.hpp).
// Models are spec strings or opened checkpoints (in-memory ones included).
#include <cmath>
#include <optional>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "diffract/core/error.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/edit/edit_jobs.hpp"
#include "diffract/run/head_scores.hpp"
#include "diffract/run/rewind_job.hpp"
#include "interruptible.hpp"

namespace diffract::python {
namespace {

// The library's edit options as the CLI spells them, plus Python's progress sink.
struct EditArgs : edit::EditCommonText {
    nb::object progress = nb::none();  // None, or report(done, total, label) (progress_sink)
};

edit::EditCommon common_of(const EditArgs& a) {
    auto c = edit::parse_edit_common(a);
    c.progress = progress_sink(a.progress);
    return c;
}

nb::dict summary(const edit::EditSummary& s) {
    nb::dict d;
    d["edited"] = s.edited;
    d["copied"] = s.copied;
    d["changed"] = s.changed;
    d["only_in_primary"] = nb::cast(s.only_in_primary);
    d["only_in_other"] = nb::cast(s.only_in_other);
    return d;
}

using HeadList = std::vector<std::pair<int, int>>;

nb::dict rewind(const std::string& out, const ModelArg& base, const ModelArg& model,
                const std::optional<ModelArg>& reference, std::optional<double> fraction,
                const std::optional<std::variant<std::string, HeadList>>& heads, const std::string& order,
                const std::string& scale_scope, std::uint64_t seed, const std::string& kv_policy,
                const std::string& o_bias, bool as_lora, const EditArgs& a, int threads,
                const std::string& max_memory, const std::string& store, const std::string& unit,
                const std::string& router) {
    run::RewindJob job;
    job.fraction = fraction;
    job.unit = edit::rewind_unit_of(unit, a.experts);
    job.router = edit::parse_router_rows(router);
    job.as_lora = as_lora;
    job.common = common_of(a);
    if (heads) {
        if (const auto* file = std::get_if<std::string>(&*heads)) {
            job.heads_file = *file;
        } else {
            job.heads.emplace();
            for (const auto& [layer, head] : std::get<HeadList>(*heads))
                job.heads->push_back({layer, head, {}});
        }
    }
    job.check();  // before any checkpoint is opened
    const auto b = opened(base);
    const auto m = opened(model);
    job.out = out;
    job.base = b.get(), job.model = m.get();
    job.ranking = analysis::parse_head_rank_options(order, scale_scope, seed);
    job.kv = edit::parse_kv_policy(kv_policy);
    job.o_bias = edit::parse_o_bias(o_bias);
    std::shared_ptr<const formats::Checkpoint> ref;
    if (!heads) {
        run::RunOptionText text;
        static_cast<analysis::SelectionText&>(text) = a;
        text.threads = threads, text.max_memory = max_memory, text.store = store, text.device = a.device;
        text.quiet = 1;
        job.run = run::parse_run_options(text);
        job.run.progress_sink = job.common.progress;  // the head ranking's compare, then the edit
        job.run.progress = static_cast<bool>(job.run.progress_sink);
        if (reference) ref = opened(*reference), job.reference = ref.get();
    }
    const auto outcome = run_interruptible([&] { return run::rewind(job); });
    auto d = summary(outcome.summary);
    nb::list rewound;
    for (const auto& h : outcome.heads) rewound.append(nb::make_tuple(h.layer, h.head));
    if (job.unit == edit::RewindUnit::experts) {
        nb::list experts;
        for (const auto& e : outcome.experts)
            experts.append(e.expert ? nb::make_tuple(e.layer, *e.expert) : nb::make_tuple(e.layer, "shared"));
        d["experts"] = experts;
    } else {
        d["heads"] = rewound;
    }
    return d;
}

// What a job wrote: the summary of its checkpoint, the checkpoints of a grid, or an adapter's summary.
nb::dict outcome_dict(const edit::EditOutcome& o) {
    if (o.summary) return summary(*o.summary);
    nb::dict d;
    if (o.adapter) {
        d["modules"] = o.adapter->modules;
        d["not_in_adapter"] = nb::cast(o.adapter->not_in_adapter);
        return d;
    }
    nb::list dirs;
    for (double w : o.omegas) dirs.append(nb::make_tuple(w, edit::omega_dir(w)));
    d["checkpoints"] = dirs;
    return d;
}

// Runs a job (its checks first, before any model is opened) with the GIL released.
template <typename Job>
nb::dict run_job(Job& job, const EditArgs& a) {
    job.common = common_of(a);
    return outcome_dict(run_interruptible([&] { return edit::run_job(job); }));
}

nb::dict truncate(const std::string& out, const ModelArg& base, const ModelArg& model,
                  std::optional<double> keep, std::optional<int> rank, std::optional<double> energy,
                  bool as_lora, const EditArgs& a) {
    edit::TruncateJob job;
    job.out = out, job.keep = keep, job.rank = rank, job.energy = energy, job.as_lora = as_lora;
    job.check();
    const auto b = opened(base), m = opened(model);
    job.base = b.get(), job.model = m.get();
    return run_job(job, a);
}

nb::dict transplant(const std::string& out, const ModelArg& base, const ModelArg& model, const EditArgs& a) {
    const auto b = opened(base), m = opened(model);
    edit::TransplantJob job{out, b.get(), m.get(), {}};
    return run_job(job, a);
}

nb::dict permute(const std::string& out, const ModelArg& model, std::uint64_t seed, const EditArgs& a) {
    const auto m = opened(model);
    edit::PermuteJob job{out, m.get(), seed, {}};
    return run_job(job, a);
}

nb::dict interpolate(const std::string& out, const ModelArg& a_model, const ModelArg& b_model,
                     std::optional<double> omega, const std::string& grid, std::int64_t max_candidates,
                     const EditArgs& a) {
    edit::InterpolateJob job;
    job.out = out, job.omega = omega, job.grid = grid, job.max_candidates = max_candidates;
    job.check();
    const auto ca = opened(a_model), cb = opened(b_model);
    job.a = ca.get(), job.b = cb.get();
    return run_job(job, a);
}

nb::dict merge_lora(const std::string& out, const std::string& adapter, const std::string& base,
                    const EditArgs& a) {
    edit::MergeLoraJob job{out, adapter, base, {}};
    return run_job(job, a);
}

nb::dict merge(const std::string& out, const ModelArg& base, const std::vector<ModelArg>& models,
               const std::string& method, const std::vector<double>& weights, double density, double lambda,
               std::optional<bool> normalize, std::uint64_t seed, const EditArgs& a) {
    edit::MergeJob job;
    job.out = out;
    auto& o = job.options;
    o.method = edit::parse_merge_method(method);
    o.weights = weights;
    o.density = density;
    o.lambda = lambda;
    using Normalize = edit::MergeOptions::Normalize;
    o.normalize = normalize ? (*normalize ? Normalize::on : Normalize::off) : Normalize::method_default;
    o.seed = seed;
    const auto b = opened(base);
    std::vector<std::shared_ptr<const formats::Checkpoint>> held;
    for (const auto& m : models) held.push_back(opened(m)), job.models.push_back(held.back().get());
    job.base = b.get();
    return run_job(job, a);
}

}  // namespace

void bind_edits(nb::module_& m) {
    nb::class_<EditArgs>(m, "EditArgs",
                         "The options every edit takes (--max-shard-size, --per-head, selection)",
                         nb::type_slots(GcSlots<EditArgs, &EditArgs::progress>::slots))
        .def(nb::init<>())
        .def_rw("max_shard_size", &EditArgs::max_shard_size)
        .def_rw("per_head", &EditArgs::per_head)
        .def_rw("allow_nonfinite", &EditArgs::allow_nonfinite)
        .def_rw("device", &EditArgs::device)
        .def_rw("roles", &EditArgs::roles)
        .def_rw("layers", &EditArgs::layers)
        .def_rw("experts", &EditArgs::experts)
        .def_rw("components", &EditArgs::components)
        .def_rw("match", &EditArgs::match)
        .def_rw("exclude", &EditArgs::exclude)
        .def_rw("progress", &EditArgs::progress, "None, or a callable receiving (done, total, label)");
    m.def("edit_rewind", &rewind, nb::arg("out"), nb::arg("base"), nb::arg("model"),
          nb::arg("reference").none(), nb::arg("fraction").none(), nb::arg("heads").none(), nb::arg("order"),
          nb::arg("scale_scope"), nb::arg("seed"), nb::arg("kv_policy"), nb::arg("o_bias"),
          nb::arg("as_lora"), nb::arg("common"), nb::arg("threads"), nb::arg("max_memory"), nb::arg("store"),
          nb::kw_only(), nb::arg("unit"), nb::arg("router"));
    m.def("edit_truncate", &truncate, nb::arg("out"), nb::arg("base"), nb::arg("model"),
          nb::arg("keep").none(), nb::arg("rank").none(), nb::arg("energy").none(), nb::arg("as_lora"),
          nb::arg("common"));
    m.def("edit_merge_lora", &merge_lora, nb::arg("out"), nb::arg("adapter"), nb::arg("base"),
          nb::arg("common"));
    m.def("edit_transplant", &transplant, nb::arg("out"), nb::arg("base"), nb::arg("model"),
          nb::arg("common"));
    m.def("edit_permute", &permute, nb::arg("out"), nb::arg("model"), nb::arg("seed"), nb::arg("common"));
    m.def("edit_interpolate", &interpolate, nb::arg("out"), nb::arg("a"), nb::arg("b"),
          nb::arg("omega").none(), nb::arg("grid"), nb::arg("max_candidates"), nb::arg("common"));
    m.def("edit_merge", &merge, nb::arg("out"), nb::arg("base"), nb::arg("models"), nb::arg("method"),
          nb::arg("weights"), nb::arg("density"), nb::arg("lambda_"), nb::arg("normalize").none(),
          nb::arg("seed"), nb::arg("common"));
}

}  // namespace diffract::python
