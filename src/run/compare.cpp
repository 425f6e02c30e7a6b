#include "diffract/run/compare.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "compare_plan_impl.hpp"
#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/job.hpp"
#include "diffract/run/result_directory.hpp"
#include "diffract/run/tables.hpp"
#include "nonfinite_report_impl.hpp"

namespace diffract::run {

using namespace analysis;

namespace {

// What a stored result must hold to be reused: under --precision f32 also the precision that served it
// (the f64 tier is f64 throughout, so its results stored before the column existed stay reusable).
std::vector<std::string> stored_fields(Precision precision) {
    auto v = compare_fields();
    // delta_svals too: a result stored before it was kept is computed again (once), so the report's
    // delta-spectrum figure is never missing a unit that compare has.
    v.insert(v.end(), {kNonfiniteCountField, kNonfiniteBaseField, kNonfiniteModelField, "delta_svals"});
    if (precision == Precision::f32) v.emplace_back(kPrecisionField);
    return v;
}

// A job's reservation: its largest unit (units run one after another). On the Gram routes that is the
// streamed size, with refining a few small components from the matrix read whole when that fits the
// budget at all (a 100k-row embedding is reserved without: its spectrum is well within the guard in the
// models we measured). The whole-matrix fallback of a nearly rank-deficient unit (docs/compare.md) is
// not reserved, so that two 7B-sized units fit a 4 GB budget side by side. --delta-only and gesdd read
// both matrices whole.
std::uint64_t job_bytes(const TensorJob& job, bool f64, linalg::SvdRoute route, bool delta_only,
                        std::uint64_t budget) {
    std::uint64_t most = 0;
    for (const auto& u : job.units) {
        std::uint64_t b = 0;
        if (route == linalg::SvdRoute::gesdd || delta_only) {
            b = analysis::compare_whole_bytes(u.block, f64);
        } else {
            b = analysis::compare_streamed_bytes(u.block, true);
            if (b > budget) b = analysis::compare_streamed_bytes(u.block, false);
        }
        most = std::max(most, b);
    }
    return most;
}

// The store key of every slot: the content of both tensors it is computed from (rank 0 hashes them)
// and the configuration. A factored delta is the adapter's exact update, not the rounded merged bytes'
// difference: it is stored under its own configuration.
std::function<store::ResultKey(std::size_t)> slot_keys(const ComparePlan& plan, Job& job) {
    std::vector<const TensorInfo*> tensors;
    for (const auto& tj : plan.jobs) tensors.push_back(tj.tensor);
    auto base_content = std::make_shared<ContentIds>(job.identify(*plan.base, tensors));
    auto content = std::make_shared<std::vector<ContentIds>>(plan.models.size());
    for (std::size_t m = 0; m < plan.models.size(); ++m) {
        tensors.clear();
        for (const auto& tj : plan.jobs)
            if (tj.in_model[m]) tensors.push_back(tj.in_model[m]);
        (*content)[m] = job.identify(*plan.models[m], tensors);
        if (job.store()) job.store()->record_pair(plan.models[m]->name, plan.base->name);
    }
    return [&plan, base_content, content](std::size_t i) {
        const auto w = plan.where(i);
        const auto& tj = plan.jobs[w.job];
        const bool factored = factored_delta(plan.settings, *tj.tensor, *tj.in_model[w.model]);
        const auto& config = plan.config_key;
        return store::ResultKey{(*content)[w.model].at(tj.in_model[w.model]), base_content->at(tj.tensor),
                                tj.units[w.unit].store_block(), factored ? config + ";factored" : config};
    };
}

// One task per base tensor against every model, longest first; it reads the base tensor and the
// models' counterparts that have a unit to compute.
std::vector<Task> compare_tasks(const ComparePlan& plan, const Job& job) {
    const auto& s = plan.settings;
    const bool f64 = s.precision == Precision::f64;
    const std::size_t n_models = plan.models.size();
    std::vector<Task> tasks;
    for (std::size_t j = 0; j < plan.jobs.size(); ++j) {
        const auto& tj = plan.jobs[j];
        double flops = 0;
        for (const auto& u : tj.units) flops += u.flops();
        Task t{{},
               {flops * static_cast<double>(n_models + 1),
                job_bytes(tj, f64, s.route, s.delta_only, plan.budget)},
               1};
        for (std::size_t i = plan.first_slot(j); i < plan.end_slot(j); ++i) t.slots.push_back(i);
        t.reads.push_back(tj.tensor);
        for (std::size_t m = 0; m < n_models; ++m)
            for (std::size_t u = 0; u < tj.units.size(); ++u)
                if (job.pending(plan.slot(j, m, u))) {
                    t.reads.push_back(tj.in_model[m]);
                    break;
                }
        tasks.push_back(std::move(t));
    }
    return tasks;
}

// Computes one tensor job against every model. NaN/Inf entries are counted before anything is
// factorised or sent to a device: each tensor once, the blocks only of a tensor that has some. A unit
// with any gets NaN fields.
void compare_tensor(const ComparePlan& plan, std::size_t j, Job& job, const Job::Done& done) {
    thread_local auto backend = linalg::make_backend(plan.device);
    const auto& s = plan.settings;
    const bool f64 = s.precision == Precision::f64;
    const auto& tj = plan.jobs[j];
    std::vector<BaseFactorization> cache(tj.units.size());
    std::optional<bool> base_clean;
    for (std::size_t m = 0; m < plan.models.size(); ++m) {
        bool any = false;
        std::optional<bool> model_clean;
        for (std::size_t u = 0; u < tj.units.size(); ++u) {
            if (!job.pending(plan.slot(j, m, u))) continue;
            any = true;
            const auto& unit = tj.units[u];
            const auto& mt = *tj.in_model[m];
            if (!base_clean) base_clean = count_nonfinite(*tj.tensor, f64) == 0;
            // A factored delta's merged tensor is never formed: its base and factors are checked.
            if (!model_clean)
                model_clean = factored_delta(s, *tj.tensor, mt)
                                  ? *base_clean && count_nonfinite(mt.low_rank->a, f64) == 0 &&
                                        count_nonfinite(mt.low_rank->b, f64) == 0
                                  : count_nonfinite(mt, f64) == 0;
            const auto bad = *base_clean && *model_clean
                                 ? NonfinitePair{}
                                 : count_nonfinite_pair(*tj.tensor, mt, unit.block, f64);
            auto fv = bad.either > 0 ? nonfinite_compare_values()
                      : f64          ? compare_unit<double>(s, unit, mt, cache[u], *backend)
                                     : compare_unit<float>(s, unit, mt, cache[u], *backend);
            set_nonfinite_counts(bad, fv);
            fv.scalars.try_emplace(kPrecisionField, f64 ? 64 : 32);  // a unit never factorised: its entries'
            done(plan.slot(j, m, u), std::move(fv));
        }
        // This model's pages are no longer needed by this thread: keep resident memory small.
        if (any) tj.in_model[m]->file->dont_need(tj.in_model[m]->offset, tj.in_model[m]->nbytes);
    }
    tj.tensor->file->dont_need(tj.tensor->offset, tj.tensor->nbytes);
}

// The rows, model by model in plan order, and the warnings for tensors with NaN/Inf entries.
// `row_model`: each row's model index.
void collect_rows(const ComparePlan& plan, Job& job, CompareResult& result,
                  std::vector<std::size_t>& row_model) {
    auto& values = job.values();
    for (std::size_t i = 0; i < values.size(); ++i)
        if (job.pending(i) && values[i]->scalars.at(kWholeRouteField) != 0) ++result.whole_route;
    NonfiniteReport nonfinite_report;
    for (std::size_t m = 0; m < plan.models.size(); ++m)
        for (std::size_t j = 0; j < plan.jobs.size(); ++j)
            for (std::size_t u = 0; u < plan.jobs[j].units.size(); ++u) {
                auto& v = values[plan.slot(j, m, u)];
                if (!v) continue;
                v->scalars.erase(kWholeRouteField);
                row_model.push_back(m);
                const auto& unit = plan.jobs[j].units[u];
                auto take = [&](const char* field) {
                    const auto n = static_cast<std::int64_t>(v->scalars[field]);
                    v->scalars.erase(field);
                    return n;
                };
                const auto nonfinite = take(kNonfiniteCountField);
                const auto bits = v->scalars.count(kPrecisionField) ? take(kPrecisionField) : 64;
                nonfinite_report.add(*plan.jobs[j].tensor, unit.block, unit.head.has_value(),
                                     take(kNonfiniteBaseField));
                nonfinite_report.add(*plan.jobs[j].in_model[m], unit.block, unit.head.has_value(),
                                     take(kNonfiniteModelField));
                CompareRow row{unit_row(plan.models[m]->name, unit), plan.base->name};
                row.nonfinite_count = nonfinite;
                row.precision_bits = static_cast<int>(bits);
                row.values = std::move(v->scalars);
                result.rows.push_back(std::move(row));
            }
    result.warnings = nonfinite_report.warnings();
}

// The head blocks of one model's rows (analysis::head_stats_of aggregates them per query head).
std::vector<HeadBlock> head_blocks(const CompareResult& result, const std::vector<std::size_t>& row_model,
                                   std::size_t model_index) {
    std::vector<HeadBlock> blocks;
    for (std::size_t r = 0; r < result.rows.size(); ++r) {
        const auto& row = result.rows[r];
        if (row_model[r] != model_index || !row.head || !row.layer) continue;
        const auto& v = row.values;
        blocks.push_back({*row.layer, row.role, *row.head, v.at("delta_frob_norm"), v.at("avg_l_agreement"),
                          v.at("avg_r_agreement"), v.at("pl_ks"), v.at("rel_delta_frob_norm")});
    }
    return blocks;
}

// The noise floor's verdict for one model (analysis::robust_z): when no head stands out, its ranking
// orders noise, and the user is told so beside the tables.
void note_uniform_update(const std::string& model, const NoiseFloor& floor, CompareResult& result) {
    if (floor.z.empty() ||
        std::any_of(floor.stands_out.begin(), floor.stands_out.end(), [](char c) { return c; }))
        return;
    double largest = -std::numeric_limits<double>::infinity();
    for (double v : floor.z)
        if (!std::isnan(v)) largest = std::max(largest, v);
    result.findings.push_back(fmt::format(
        "{}: no head's update stands out from the others' (largest robust z {:.2f}; none above {} at {}x the "
        "median relative update or more, none >= {}x the median: as uniform noise or a quantisation error "
        "is): its importance ranking orders noise (docs/compare.md)",
        model, largest, kStandsOutZ, kStandsOutMinRatio, kStandsOutRatio));
}

// Per head of each model (the reference aside): its statistics, those of the reference, its rank.
void rank_model_heads(const ComparePlan& plan, const std::vector<std::size_t>& row_model,
                      CompareResult& result) {
    const auto& g = *plan.base->schema.heads;
    const int ref = plan.ref_index;
    std::vector<HeadStats> ref_stats;
    if (ref >= 0) ref_stats = head_stats_of(head_blocks(result, row_model, static_cast<std::size_t>(ref)), g);
    std::map<std::pair<int, int>, const HeadStats*> ref_of;
    for (const auto& r : ref_stats) ref_of[{r.layer, r.head}] = &r;
    for (std::size_t m = 0; m < plan.models.size(); ++m) {
        if (static_cast<int>(m) == ref) continue;
        const auto dom = head_stats_of(head_blocks(result, row_model, m), g);
        const auto ranked = rank_heads(dom, ref >= 0 ? &ref_stats : nullptr, *plan.ranking);
        std::vector<double> relative;
        for (const auto& s : dom) relative.push_back(s.relative_update());
        const auto floor = noise_floor(relative);
        note_uniform_update(plan.models[m]->name, floor, result);
        for (std::size_t i = 0; i < dom.size(); ++i) {
            HeadRow row;
            row.model = plan.models[m]->name;
            row.reference = ref >= 0 ? plan.models[static_cast<std::size_t>(ref)]->name : "";
            row.layer = dom[i].layer, row.head = dom[i].head;
            row.kv_head = g.kv_head_of(dom[i].head), row.kv_group_size = g.group_size();
            row.domain = dom[i];
            if (auto it = ref_of.find({dom[i].layer, dom[i].head}); it != ref_of.end()) row.ref = *it->second;
            row.ranked = ranked[i];
            row.update_z = floor.z[i];
            row.stands_out = floor.stands_out[i] != 0;
            result.heads.push_back(row);
        }
    }
}

}  // namespace

// The stages: the plan (what is compared with what), the keys and the Job's look-up, the tasks and
// their computation, then on rank 0 the rows and the per-head ranking.
CompareResult compare(const CompareOptions& o) {
    CompareResult result;
    result.ranking = o.ranking;
    result.allow_partial = o.allow_partial;
    const auto plan = plan_compare(o, result.skipped);

    std::vector<const formats::Checkpoint*> inputs{plan.base};
    inputs.insert(inputs.end(), plan.models.begin(), plan.models.end());
    Job job("compare", o.run, inputs);
    std::vector<char> compared(plan.slots(), 0);
    for (std::size_t i = 0; i < plan.slots(); ++i) compared[i] = plan.compared(i);
    job.look_up(compared, slot_keys(plan, job), stored_fields(o.precision), compare_vector_fields());
    result.reused = job.reused();

    job.run(compare_tasks(plan, job), [&](const Task& task, const Job::Done& done, const Job::Advance&) {
        compare_tensor(plan, plan.where(task.slots.front()).job, job, done);
    });
    result.computed = job.computed();
    if (!job.is_root()) return result;

    std::vector<std::size_t> row_model;
    collect_rows(plan, job, result, row_model);
    if (plan.ranking) rank_model_heads(plan, row_model, result);
    return result;
}

void write_compare_csvs(const CompareResult& r, const std::string& out_dir) {
    std::map<std::string, std::string> files{{"compare.csv", to_csv(compare_table(r))},
                                             {"heads.csv", to_csv(heads_table(r))}};
    if (r.allow_partial) files["skipped.csv"] = to_csv(skipped_table(r));
    write_result_directory(out_dir, files);
}

}  // namespace diffract::run
