#include "diffract/run/compare.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "compare_overlap_impl.hpp"
#include "compare_plan_impl.hpp"
#include "diffract/analysis/expert_ranking.hpp"
#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/analysis/option_values.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/job.hpp"
#include "diffract/run/result_directory.hpp"
#include "diffract/run/tables.hpp"

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

// One task per base tensor against every model, longest first; it reads the base tensor and the
// models' counterparts that have a unit to compute.
std::vector<Task> compare_tasks(const ComparePlan& plan, const Job& job) {
    const std::size_t n_models = plan.models.size();
    std::vector<Task> tasks;
    for (std::size_t j = 0; j < plan.jobs.size(); ++j) {
        const auto& tj = plan.jobs[j];
        double flops = 0;
        for (const auto& u : tj.units) flops += u.flops();
        Task t{{},
               {flops * static_cast<double>(n_models + 1), tensor_job_bytes(tj, plan.settings, plan.budget)},
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

// Each router's rows, base against model (analysis::router_drift): the router matrices are small
// (experts × hidden) and read whole.
std::vector<analysis::RouterRow> router_rows(const formats::Checkpoint& base, const formats::Checkpoint& ck) {
    std::vector<analysis::RouterRow> out;
    for (const auto& t : base.tensors) {
        const auto r = model::classify_tensor(t.name);
        if (r.role != model::Role::router || !r.layer || t.shape.size() != 2 || !dtype_is_float(t.dtype))
            continue;
        const auto pair = formats::align(ck, base, t);
        if (pair.issue != formats::PairIssue::none) continue;
        const auto whole = model::whole_matrix(base.schema, t);
        const auto a = read_matrix<double>(t, whole), b = read_matrix<double>(*pair.other, whole);
        const auto rows = analysis::router_drift(*r.layer, {a.data.begin(), a.data.end()},
                                                 {b.data.begin(), b.data.end()}, a.rows, a.cols);
        out.insert(out.end(), rows.begin(), rows.end());
    }
    return out;
}

// The rows, model by model in plan order, the warnings for tensors with NaN/Inf entries, and each
// model's head blocks (the head table's input).
std::vector<ModelHeadBlocks> collect_rows(const ComparePlan& plan, Job& job, CompareResult& result,
                                          std::vector<analysis::ModelExperts>& experts) {
    auto& values = job.values();
    for (std::size_t i = 0; i < values.size(); ++i)
        if (job.pending(i) && values[i]->bookkeeping.whole_route.value()) ++result.whole_route;
    NonfiniteReport nonfinite_report;
    std::vector<ModelHeadBlocks> heads(plan.models.size());
    experts.assign(plan.models.size(), {});
    for (std::size_t m = 0; m < plan.models.size(); ++m) {
        heads[m].model = plan.models[m]->name;
        experts[m].model = plan.models[m]->name;
        for (std::size_t j = 0; j < plan.jobs.size(); ++j)
            for (std::size_t u = 0; u < plan.jobs[j].units.size(); ++u) {
                auto& v = values[plan.slot(j, m, u)];
                if (!v) continue;
                const auto& unit = plan.jobs[j].units[u];
                const auto& done = v->bookkeeping;
                nonfinite_report.add(*plan.jobs[j].tensor, unit.block, unit.head.has_value(),
                                     done.nonfinite_base.value_or(0));
                nonfinite_report.add(*plan.jobs[j].in_model[m], unit.block, unit.head.has_value(),
                                     done.nonfinite_model.value_or(0));
                CompareRow row{unit_row(plan.models[m]->name, unit), plan.base->name};
                row.nonfinite_count = done.nonfinite_count.value_or(0);
                row.precision_bits = done.precision_bits.value_or(64);
                row.values = std::move(v->scalars);
                // The ranked heads are the language model's: a tower's heads are rows of compare.csv,
                // never pooled into the language model's ranking.
                if (unit.head && unit.layer && unit.component == model::Component::language) {
                    const auto c = unit_change(row.values);
                    heads[m].blocks.push_back({.layer = *unit.layer,
                                               .role = unit.role,
                                               .head = *unit.head,
                                               .delta_frob_norm = c.delta_frob_norm,
                                               .avg_l_agreement = c.avg_l_agreement,
                                               .avg_r_agreement = c.avg_r_agreement,
                                               .pl_ks = c.pl_ks,
                                               .rel_delta_frob_norm = c.rel_delta_frob_norm});
                }
                if (!unit.head && unit.layer && unit.expert_kind != model::ExpertKind::none &&
                    model::role_is_mlp_projection(unit.role)) {
                    const auto c = unit_change(row.values);
                    experts[m].matrices.push_back({.layer = *unit.layer,
                                                   .expert = unit.expert,
                                                   .kind = unit.expert_kind,
                                                   .role = unit.role,
                                                   .delta_frob_norm = c.delta_frob_norm,
                                                   .rel_delta_frob_norm = c.rel_delta_frob_norm,
                                                   .avg_l_agreement = c.avg_l_agreement,
                                                   .avg_r_agreement = c.avg_r_agreement,
                                                   .pl_ks = c.pl_ks});
                }
                result.rows.push_back(std::move(row));
            }
    }
    result.warnings = nonfinite_report.warnings();
    for (const auto* m : plan.models)
        result.warnings.insert(result.warnings.end(), m->warnings.begin(), m->warnings.end());
    return heads;
}

}  // namespace

// The stages: the plan (what is compared with what, and from which tensors each slot is computed), the
// Job's look-up, the tasks and their computation (analysis::compare_tensor_job), then on rank 0 the rows
// and the head table (analysis::rank_model_heads).
void apply_compare_options(const CompareOptionText& t, CompareOptions& o) {
    o.top_k = t.top_k;
    o.ranking = analysis::parse_head_rank_options(t.order, t.scale_scope, t.seed);
    o.precision = analysis::parse_precision(t.precision);
    o.route = analysis::parse_svd_route(t.svd_route);
    o.delta_only = t.delta_only;
    o.heads = t.heads;
    o.allow_partial = t.allow_partial;
    o.run.selection.allow_partial = t.allow_partial;
    o.overlap_k = t.overlap_k;
}

CompareResult compare(const CompareOptions& o) {
    CompareResult result;
    result.ranking = o.ranking;
    result.allow_partial = o.allow_partial;
    const auto plan = plan_compare(o, result.skipped);

    Job job("compare", o.run, plan.base, plan.models);
    job.look_up(
        plan.slots(), [&](std::size_t slot) { return plan.source(slot); }, stored_fields(o.precision),
        compare_vector_fields());
    result.reused = job.reused();
    result.per_model.assign(plan.models.size(), {});
    for (std::size_t s = 0; s < plan.slots(); ++s)
        if (plan.compared(s)) {
            auto& counts = result.per_model[plan.where(s).model];
            (job.pending(s) ? counts.computed : counts.reused) += 1;
        }

    job.run(compare_tasks(plan, job), [&](const Task& task, const Job::Done& done, const Job::Advance&,
                                          linalg::Backend& backend) {
        const std::size_t j = plan.where(task.slots.front()).job;
        compare_tensor_job(
            plan.settings, plan.jobs[j],
            [&](std::size_t m, std::size_t u) { return job.pending(plan.slot(j, m, u)); },
            [&](std::size_t m, std::size_t u, FieldValues v) { done(plan.slot(j, m, u), std::move(v)); },
            backend);
    });
    result.computed = job.computed();
    if (!job.is_root()) return result;

    std::vector<analysis::ModelExperts> experts;
    const auto heads = collect_rows(plan, job, result, experts);
    if (std::any_of(experts.begin(), experts.end(), [](const auto& e) { return !e.matrices.empty(); })) {
        for (std::size_t m = 0; m < plan.models.size(); ++m)
            if (static_cast<int>(m) != plan.ref_index)
                experts[m].router = router_rows(*plan.base, *plan.models[m]);
        result.experts =
            analysis::rank_model_experts(experts, plan.ref_index, result.ranking, result.findings);
        if (o.overlap_k > 0)
            result.expert_overlap = expert_overlaps(plan, o.overlap_k, o.ranking.seed, o.run);
    }
    if (plan.ranking)
        result.heads =
            rank_model_heads(heads, plan.ref_index, *plan.base->schema.heads, *plan.ranking, result.findings);
    return result;
}

void write_compare_csvs(const CompareResult& r, const std::string& out_dir) {
    std::map<std::string, std::string> files{{"compare.csv", to_csv(compare_table(r))},
                                             {"heads.csv", to_csv(heads_table(r))}};
    if (r.allow_partial) files["skipped.csv"] = to_csv(skipped_table(r));
    if (!r.experts.empty()) files["experts.csv"] = to_csv(experts_table(r));  // a mixture of experts
    if (!r.expert_overlap.empty()) files["expert_overlap.csv"] = to_csv(expert_overlap_table(r));
    write_result_directory(out_dir, files);
}

}  // namespace diffract::run
