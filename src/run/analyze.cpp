#include "diffract/run/analyze.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "diffract/analysis/custom_fields.hpp"
#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/analysis/unit_fields.hpp"
#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/job.hpp"
#include "diffract/run/result_directory.hpp"
#include "diffract/run/tables.hpp"

namespace diffract::run {

using namespace analysis;

namespace {

// Fields every analysis computes besides the requested ones: the aggregates need the norms, and
// the singular values are kept in the store for compare to reuse.
const std::vector<std::string> kAlwaysStored = {"frob_norm", "l2_norm"};
const std::vector<std::string> kStoredVectors = {"weights_svals"};

// A unit of one of the models.
struct PlannedUnit {
    std::size_t model;
    MatrixUnit unit;
};

// The job's result slots: slot i < units is unit i's built-in fields; slot units·(1 + c) + i is
// custom field c of unit i, kept in the store under its own configuration (the field's version), so a
// changed function is recomputed alone and the built-in fields are reused. Custom fields are computed
// in the same tasks as the unit's built-in fields: on the job's threads, under its memory budget.
struct Slots {
    std::size_t units = 0, custom = 0;
    std::size_t count() const { return units * (1 + custom); }
    std::size_t unit_of(std::size_t slot) const { return slot % units; }
    std::optional<std::size_t> custom_of(std::size_t slot) const {
        return slot < units ? std::nullopt : std::optional<std::size_t>(slot / units - 1);
    }
    std::size_t custom_slot(std::size_t c, std::size_t unit) const { return units * (1 + c) + unit; }
};

// Unit `unit`'s slots still pending after the store's look-up: its built-in fields, then its custom ones.
std::vector<std::size_t> pending_slots(const Slots& slots, const Job& job, std::size_t unit) {
    std::vector<std::size_t> out;
    if (job.pending(unit)) out.push_back(unit);
    for (std::size_t c = 0; c < slots.custom; ++c)
        if (job.pending(slots.custom_slot(c, unit))) out.push_back(slots.custom_slot(c, unit));
    return out;
}

// The units a task's slots belong to, in order, each once.
std::vector<std::size_t> task_units(const Slots& slots, const Task& task) {
    std::vector<std::size_t> out;
    for (auto s : task.slots)
        if (std::find(out.begin(), out.end(), slots.unit_of(s)) == out.end()) out.push_back(slots.unit_of(s));
    return out;
}

// Run time: the units' SVD flops. Memory: the largest unit's working set, plus, for a batch, the
// tensor decoded once as f64 (and as f32 on its way there: 12 bytes an element).
// A custom field that reads the entries holds them once more, as f64.
TaskCost task_cost(const std::vector<PlannedUnit>& units, const std::vector<std::size_t>& unit_ids, bool f64,
                   bool custom_weights) {
    TaskCost c{0, 0};
    for (auto i : unit_ids) {
        const auto& u = units[i].unit;
        c.cost += u.flops();
        c.bytes = std::max(c.bytes, u.bytes(f64) + (custom_weights ? u.bytes(true) : 0));
    }
    if (unit_ids.size() > 1)
        c.bytes += 12 * static_cast<std::uint64_t>(units[unit_ids.front()].unit.tensor->numel());
    return c;
}

// The units with a pending slot, in plan order, one task each or, `by_tensor`, grouped by (model,
// tensor); a task holds its units' pending slots. Built-in fields move the progress line by one step
// and one per resampling draw (`draws`), each custom field by one.
std::vector<Task> make_tasks(const std::vector<PlannedUnit>& units, const Slots& slots, const Job& job,
                             bool by_tensor, bool f64, std::size_t draws, bool custom_weights) {
    std::vector<Task> tasks;
    std::map<std::pair<std::size_t, const TensorInfo*>, std::size_t> index;
    for (std::size_t i = 0; i < units.size(); ++i) {
        const auto pending = pending_slots(slots, job, i);
        if (pending.empty()) continue;
        if (!by_tensor) {
            tasks.push_back({pending, {}, 1});
            continue;
        }
        const auto [it, fresh] = index.try_emplace({units[i].model, units[i].unit.tensor}, tasks.size());
        if (fresh) tasks.emplace_back();
        auto& t = tasks[it->second].slots;
        t.insert(t.end(), pending.begin(), pending.end());
    }
    for (auto& t : tasks) {
        const auto ids = task_units(slots, t);
        t.cost = task_cost(units, ids, f64, custom_weights);
        t.progress_steps = 0;
        for (auto s : t.slots) t.progress_steps += slots.custom_of(s) ? 1 : 1 + draws;
        t.reads = {units[ids.front()].unit.tensor};
    }
    return tasks;
}

// What to compute and keep: the metrics.csv columns (per-matrix fields, then custom fields), the
// per-matrix fields the aggregates are built from, the fields a stored result must hold to be reused.
struct FieldPlan {
    std::vector<std::string> columns;       // metrics.csv, in catalog order, then the custom fields
    std::vector<std::string> compute;       // built-in fields and vectors the kernels compute
    std::vector<std::string> stored_check;  // what a stored result must hold
    std::vector<analysis::CustomField> custom;
    std::vector<std::vector<std::string>> custom_stored;  // per custom field: its name, what its slot holds
};

FieldPlan plan_fields(const AnalyzeOptions& o) {
    FieldPlan p;
    std::vector<std::string> wanted;
    for (const auto& f : field_catalog()) {
        if (std::find(o.metrics.begin(), o.metrics.end(), f.name) == o.metrics.end()) continue;
        if (f.level == Level::parameter)
            p.columns.emplace_back(f.name);
        else if (f.level == Level::in_model)
            wanted.emplace_back(f.inputs);  // an aggregate: the per-matrix field it is computed from
    }
    wanted.insert(wanted.begin(), p.columns.begin(), p.columns.end());
    for (const auto& f : kAlwaysStored) wanted.push_back(f);
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    p.stored_check = wanted;
    p.stored_check.insert(p.stored_check.end(), kStoredVectors.begin(), kStoredVectors.end());
    p.compute = p.stored_check;
    p.stored_check.emplace_back(kNonfiniteCountField);  // reused results keep their count of NaN/Inf entries
    // ... and, under --precision f32, the precision that served them (the f64 tier is f64 throughout, so its
    // results stored before the column existed stay reusable).
    if (o.kernel.precision == Precision::f32) p.stored_check.emplace_back(kPrecisionField);
    // Registered custom fields named in metrics: own columns after the catalog's, own job slots.
    p.custom = custom_fields_in(o.metrics);
    for (const auto& f : p.custom) p.columns.push_back(f.name), p.custom_stored.push_back({f.name});
    return p;
}

// Every selected matrix and head block of every model.
std::vector<PlannedUnit> plan_units(const AnalyzeOptions& o) {
    std::vector<PlannedUnit> units;
    for (std::size_t m = 0; m < o.models.size(); ++m)
        for (auto& u : plan_matrices(o.models[m], o.run.selection, o.heads)) units.push_back({m, u});
    if (units.empty()) {
        std::string paths;
        for (const auto& m : o.models) paths += (paths.empty() ? "" : ", ") + m.path;
        analysis::throw_nothing_selected(paths, o.run.selection, "no matrix to analyse");
    }
    return units;
}

// What slot i is computed from (the Job keys results by the content of its tensors): its unit's
// tensor and block, under the kernel's configuration; a custom field's slot under the field's own.
SlotSource slot_source(const AnalyzeOptions& o, const std::vector<PlannedUnit>& units, const Slots& slots,
                       const FieldPlan& fields, std::size_t slot) {
    const auto& u = units[slots.unit_of(slot)];
    SlotSource s{&o.models[u.model], u.unit.tensor, nullptr, u.unit.store_block(), o.kernel.key()};
    if (const auto c = slots.custom_of(slot)) s.config = custom_field_config(s.config, fields.custom[*c]);
    return s;
}

// The custom fields of one unit among a task's slots, from the unit's built-in `values` (which hold its
// singular values): NaN for a unit with NaN/Inf entries, which a callback is never handed.
void custom_task_fields(const FieldPlan& fields, const Slots& slots, const PlannedUnit& unit,
                        const std::vector<std::size_t>& custom_slots, const FieldValues& values,
                        const Job::Done& done, const Job::Advance& advance) {
    const bool clean = values.bookkeeping.nonfinite_count.value() == 0;
    CustomFieldComputer computer(*unit.unit.tensor, unit.unit.block, values);
    for (auto s : custom_slots) {
        throw_if_cancelled();
        const auto& f = fields.custom[*slots.custom_of(s)];
        FieldValues v;
        v.scalars[f.name] = clean ? computer.compute(f) : std::nan("");
        done(s, std::move(v));
        advance(1);
    }
}

// Computes one task's slots. With `precompute` (a device's whole-tensor task) the blocks' singular
// values are computed together first: NaN/Inf entries are counted before the device (or the batch)
// sees the tensor, the whole tensor once, its blocks only when it has some; blocks with any stay out
// of the batch. A unit whose built-in fields were reused but whose custom field is pending computes
// only its singular values again.
void analyze_task(const AnalyzeOptions& o, const std::vector<PlannedUnit>& units, const FieldPlan& fields,
                  const Slots& slots, const Task& task, bool precompute, std::size_t draws,
                  const Job::Done& done, const Job::Advance& advance, linalg::Backend& backend) {
    const bool f64 = o.kernel.precision == Precision::f64;
    const auto ids = task_units(slots, task);
    const auto& tensor = *units[ids.front()].unit.tensor;
    std::vector<std::optional<linalg::Spectrum>> svals(ids.size());
    std::vector<std::optional<std::int64_t>> nonfinite(ids.size());
    if (precompute) {
        const bool clean = count_nonfinite(tensor, f64) == 0;
        std::vector<MatrixBlock> blocks;
        std::vector<std::size_t> batched;
        for (std::size_t k = 0; k < ids.size(); ++k) {
            nonfinite[k] = clean ? 0 : count_nonfinite(tensor, units[ids[k]].unit.block, f64);
            if (*nonfinite[k] == 0) blocks.push_back(units[ids[k]].unit.block), batched.push_back(k);
        }
        const TensorScope scope(tensor.path(), tensor.name);
        std::vector<linalg::Spectrum> s;
        if (!blocks.empty() && f64)
            for (auto& v : backend.block_singular_values(tensor, blocks, true, o.kernel.route))
                s.push_back({std::move(v), false});
        if (!blocks.empty() && !f64) s = backend.f32_block_spectra(tensor, blocks, o.kernel.route);
        for (std::size_t b = 0; b < batched.size(); ++b) svals[batched[b]] = std::move(s[b]);
    }
    for (std::size_t k = 0; k < ids.size(); ++k) {
        const auto i = ids[k];
        const auto& unit = units[i].unit;
        const bool builtin = std::find(task.slots.begin(), task.slots.end(), i) != task.slots.end();
        std::vector<std::size_t> custom_slots;
        for (auto s : task.slots)
            if (s != i && slots.unit_of(s) == i) custom_slots.push_back(s);
        std::size_t ticks = 0;  // a fit with too few points skips its draws: the rest is advanced below
        // Each resampling draw: progress, and Ctrl-C noticed within a matrix's bootstrap.
        auto on_draw = [&] {
            throw_if_cancelled();
            if (ticks < draws) ++ticks, advance(1);
        };
        const auto& wanted = builtin ? fields.compute : kStoredVectors;
        auto values = f64 ? compute_unit_fields<double>(unit, std::move(svals[k]), nonfinite[k], wanted,
                                                        o.kernel, backend, on_draw)
                          : compute_unit_fields<float>(unit, std::move(svals[k]), nonfinite[k], wanted,
                                                       o.kernel, backend, on_draw);
        custom_task_fields(fields, slots, units[i], custom_slots, values, done, advance);
        if (builtin) {
            done(i, std::move(values));
            advance(1 + draws - ticks);
        }
    }
    // The tensor's pages are no longer needed by this thread: keep resident memory small.
    tensor.release_pages();
}

// The rows (a field no kernel produced is a defect, never a NaN), the WeightWatcher rows, the
// aggregates over whole matrices and the warnings.
void collect_rows(const AnalyzeOptions& o, const std::vector<PlannedUnit>& units,
                  std::vector<FieldValues>& values, AnalyzeResult& result) {
    const bool f64 = o.kernel.precision == Precision::f64;
    NonfiniteReport nonfinite_report;
    for (std::size_t i = 0; i < units.size(); ++i)
        nonfinite_report.add(*units[i].unit.tensor, units[i].unit.block, units[i].unit.head.has_value(),
                             values[i].bookkeeping.nonfinite_count.value_or(0));
    result.warnings = nonfinite_report.warnings();
    for (const auto& m : o.models)
        result.warnings.insert(result.warnings.end(), m.warnings.begin(), m.warnings.end());
    for (const auto& m : o.models)
        for (auto& w : analysis::unread_matrices(m, o.run.selection)) result.warnings.push_back(std::move(w));
    std::vector<std::map<model::Component, std::vector<FieldValues>>> whole(o.models.size());
    result.convention = o.convention;
    for (std::size_t i = 0; i < units.size(); ++i) {
        const auto& j = units[i];
        if (o.convention == Convention::weightwatcher && !j.unit.head &&
            weightwatcher_analyses(j.unit.block.logical_rows(), j.unit.block.logical_cols())) {
            // numpy's matrix_rank threshold uses the eps of the array it decomposes: WeightWatcher
            // casts the weights to f64 (W.astype(float)), as our default precision does.
            const double eps =
                f64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
            const auto it = values[i].vectors.find("weights_svals");
            const std::vector<double> none;
            result.weightwatcher.push_back(weightwatcher_row(
                static_cast<int>(result.weightwatcher.size()), j.unit.tensor->name,
                j.unit.block.logical_rows(), j.unit.block.logical_cols(),
                it == values[i].vectors.end() || values[i].bookkeeping.nonfinite_count.value_or(0) > 0
                    ? none
                    : it->second,
                eps));
        }
        MetricRow row = unit_row(o.models[j.model].name, j.unit);
        for (const auto& f : result.fields) {
            auto it = values[i].scalars.find(f);
            if (it == values[i].scalars.end())
                throw std::logic_error(
                    fmt::format("analyze: no value of '{}' for {}", f, j.unit.tensor->name));
            row.values[f] = it->second;
        }
        const auto& done = values[i].bookkeeping;
        row.nonfinite_count = done.nonfinite_count.value_or(0);
        row.precision_bits = done.precision_bits.value_or(f64 ? 64 : 32);
        result.rows.push_back(std::move(row));
        if (!j.unit.head) whole[j.model][j.unit.component].push_back(std::move(values[i]));
    }
    for (std::size_t m = 0; m < o.models.size(); ++m) {
        if (whole[m].empty()) whole[m][model::Component::language];  // a model of head blocks only
        for (const auto& [component, matrices] : whole[m])
            result.aggregates.push_back({o.models[m].name, component, model_aggregates(matrices)});
    }
}

}  // namespace

// The stages: the fields and units to compute, their keys and the store's look-up, the tasks and
// their computation, the custom fields, then on rank 0 the rows.
AnalyzeResult analyze(const AnalyzeOptions& o) {
    o.kernel.check();  // here, so that the CLI and Python refuse alike
    AnalyzeResult result;
    const auto fields = plan_fields(o);
    result.fields = fields.columns;
    std::vector<const formats::Checkpoint*> inputs;
    for (const auto& m : o.models) inputs.push_back(&m);
    Job job("analyze", o.run, nullptr, inputs);
    const auto units = plan_units(o);
    const Slots slots{units.size(), fields.custom.size()};
    job.look_up(
        slots.count(), [&](std::size_t slot) { return slot_source(o, units, slots, fields, slot); },
        [&](std::size_t slot) -> const std::vector<std::string>& {
            const auto c = slots.custom_of(slot);
            return c ? fields.custom_stored[*c] : fields.stored_check;
        },
        kStoredVectors);
    // Counted per unit: one whose slots were all reused is reused, any other is computed.
    std::size_t pending_units = 0;
    result.per_model.assign(o.models.size(), {});
    double all_work = 0, pending_work = 0;
    for (std::size_t i = 0; i < units.size(); ++i) {
        const bool pending = !pending_slots(slots, job, i).empty();
        pending_units += pending;
        all_work += units[i].unit.flops();
        if (pending) pending_work += units[i].unit.flops();
        auto& counts = result.per_model[units[i].model];
        (pending ? counts.computed : counts.reused) += 1;
    }
    result.reused = units.size() - pending_units;
    result.computed_work = all_work > 0 ? pending_work / all_work : 0;

    // On a device a task is one stored tensor's pending units (its whole matrix and its heads): the
    // tensor is uploaded once at its storage width and the blocks' singular values computed
    // together, the heads as one batch. On the CPU that gains nothing (bench_analyze: 0.9× on the
    // heads) and whole-tensor tasks balance worse over the threads (1.7% more wall time on a 4-layer
    // 1024-wide family), so there a task is one matrix, as it always was.
    const bool f64 = o.kernel.precision == Precision::f64;
    const bool by_tensor = o.tensor_tasks.value_or(o.run.device != linalg::Device::cpu);
    // Resampling fields (p-values, the alpha CI) cost their draws' fits per matrix: the progress line
    // counts the draws too, so a long matrix shows it is moving.
    const std::size_t draws = resampling_draws(fields.compute, o.kernel);
    // Values computed in advance serve every metric but singular vectors.
    const bool precompute = by_tensor && !fields_need_vectors(fields.compute);
    const bool custom_weights = std::any_of(fields.custom.begin(), fields.custom.end(), [](const auto& f) {
        return std::find(f.needs.begin(), f.needs.end(), "weights") != f.needs.end();
    });
    job.run(
        make_tasks(units, slots, job, by_tensor, f64, draws, custom_weights),
        [&](const Task& task, const Job::Done& done, const Job::Advance& advance, linalg::Backend& backend) {
            analyze_task(o, units, fields, slots, task, precompute, draws, done, advance, backend);
        });
    result.computed = job.is_root() ? pending_units : job.computed();
    if (!job.is_root()) return result;
    auto& slot_values = job.values();
    std::vector<FieldValues> values;
    for (std::size_t i = 0; i < units.size(); ++i) values.push_back(std::move(*slot_values[i]));
    for (std::size_t s = units.size(); s < slots.count(); ++s)
        for (auto& [field, v] : slot_values[s]->scalars) values[slots.unit_of(s)].scalars[field] = v;
    collect_rows(o, units, values, result);
    return result;
}

void write_analyze_csvs(const AnalyzeResult& r, const std::string& out_dir) {
    std::map<std::string, std::string> files{{"metrics.csv", to_csv(metrics_table(r))},
                                             {"aggregates.csv", to_csv(aggregates_table(r))}};
    if (r.convention == Convention::weightwatcher)
        files["weightwatcher.csv"] = weightwatcher_csv(r.weightwatcher);
    write_result_directory(out_dir, files);
}

}  // namespace diffract::run
