#include "diffract/run/compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

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

// One tensor of the base with its units, and where it is in each model.
struct TensorJob {
    const TensorInfo* tensor = nullptr;
    std::vector<MatrixUnit> units;
    std::vector<const TensorInfo*> in_model;  // per model; null: skipped
    std::vector<char> heads_ok;               // per model: head blocks compared
};

std::string geometry_string(const model::HeadGeometry& g) {
    return fmt::format("{} heads / {} kv heads / head_dim {}", g.n_heads, g.n_kv_heads, g.head_dim);
}

int projection_index(const std::string& role) {
    if (role == "attn_q") return 0;
    if (role == "attn_k") return 1;
    if (role == "attn_v") return 2;
    if (role == "attn_o") return 3;
    return -1;
}

const std::vector<std::string>& stored_fields() {
    static const std::vector<std::string> f = [] {
        auto v = compare_fields();
        // delta_svals too: a result stored before it was kept is computed again (once), so the report's
        // delta-spectrum figure is never missing a unit that compare has.
        v.insert(v.end(), {kNonfiniteCountField, kNonfiniteBaseField, kNonfiniteModelField, "delta_svals"});
        return v;
    }();
    return f;
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

}  // namespace

CompareResult compare(const CompareOptions& o) {
    if (o.top_k < 1)
        throw InputError(fmt::format("--top-k: expected a positive number of components, found {}", o.top_k));
    if (o.delta_only && (o.ranking.order == HeadOrder::agreement || o.ranking.order == HeadOrder::pl_ks))
        throw InputError(fmt::format("--order {}: the heads' {} is not computed with --delta-only",
                                     head_order_name(o.ranking.order), head_order_name(o.ranking.order)));
    if (o.delta_only && o.route != linalg::SvdRoute::auto_route)
        throw InputError(
            "--svd-route: --delta-only computes each delta's singular values with gesdd "
            "(or from a LoRA adapter's factors); leave --svd-route at auto");
    CompareResult result;
    result.ranking = o.ranking;
    result.allow_partial = o.allow_partial;
    const auto& base = o.base;
    // The models, then the reference (ranked against, never ranked).
    std::vector<const formats::Checkpoint*> models;
    for (const auto& m : o.models) models.push_back(&m);
    int ref_index = -1;
    if (o.reference) {
        models.push_back(&*o.reference);
        ref_index = static_cast<int>(models.size()) - 1;
    }
    if (models.empty())
        throw InputError("compare: give at least one model (or --reference) to compare with the base");
    const std::size_t n_models = models.size();

    std::vector<const formats::Checkpoint*> inputs{&base};
    inputs.insert(inputs.end(), models.begin(), models.end());
    check_model_names(models, &base);
    Job job("compare", o.run, inputs);

    // The plan, over the base, grouped by tensor (plan_matrices lists a tensor's units together).
    std::vector<TensorJob> jobs;
    for (auto& u : plan_matrices(base, o.run.selection, o.heads)) {
        if (jobs.empty() || jobs.back().tensor != u.tensor) jobs.push_back({u.tensor, {}, {}, {}});
        jobs.back().units.push_back(u);
    }
    if (jobs.empty())
        analysis::throw_nothing_selected(base.path, o.run.selection, "no matrix of the base to compare");

    // Every model must match the base: refuse on the first mismatch, or skip and record it.
    auto mismatch = [&](const formats::Checkpoint& ck, const std::string& source, const std::string& tensor,
                        const std::string& block, const std::string& what) {
        if (!o.allow_partial)
            throw_input_error(source, tensor,
                              o.suggest_allow_partial ? what + " (use --allow-partial to skip it)" : what);
        result.skipped.push_back({ck.name, tensor, block, error_context(source, tensor, what)});
    };
    for (auto& tj : jobs) tj.in_model.assign(n_models, nullptr), tj.heads_ok.assign(n_models, 0);
    std::set<const TensorInfo*> planned;  // the base's tensors in the plan
    for (const auto& tj : jobs) planned.insert(tj.tensor);
    for (std::size_t m = 0; m < n_models; ++m) {
        const auto& ck = *models[m];
        bool heads_ok = true;
        if (o.heads && base.schema.heads) {
            const auto& bg = *base.schema.heads;
            if (!ck.schema.heads) {
                mismatch(ck, ck.path, "", "heads",
                         fmt::format("head geometry unknown (the base has {})", geometry_string(bg)));
                heads_ok = false;
            } else {
                const auto& g = *ck.schema.heads;
                if (g.n_heads != bg.n_heads || g.n_kv_heads != bg.n_kv_heads || g.head_dim != bg.head_dim) {
                    mismatch(ck, ck.path, "", "heads",
                             fmt::format("head geometry differs from the base (expected {}, found {})",
                                         geometry_string(bg), geometry_string(g)));
                    heads_ok = false;
                } else if (ck.schema.qkv_layout != base.schema.qkv_layout ||
                           ck.schema.conv1d_transposed != base.schema.conv1d_transposed) {
                    mismatch(ck, ck.path, "", "heads",
                             fmt::format("attention layout differs from the base (expected {}, found {})",
                                         base.schema.architecture, ck.schema.architecture));
                    heads_ok = false;
                }
            }
        }
        for (auto& tj : jobs) {
            const auto& name = tj.tensor->name;
            const TensorInfo* t = formats::counterpart(ck, base, *tj.tensor);
            if (!t) {
                mismatch(ck, ck.path, name, "", "missing from this model (present in the base)");
            } else if (t->shape != tj.tensor->shape) {
                mismatch(ck, t->path(), name, "",
                         fmt::format("shape differs from the base (expected {}, found {})",
                                     shape_string(tj.tensor->shape), shape_string(t->shape)));
            } else if (!dtype_is_float(t->dtype) || ck.unsupported_types.count(t->name)) {
                mismatch(ck, t->path(), name, "",
                         fmt::format("dtype {} cannot be compared (the base has {})", dtype_name(t->dtype),
                                     dtype_name(tj.tensor->dtype)));
            } else {
                tj.in_model[m] = t;
                tj.heads_ok[m] = heads_ok;
            }
        }
        for (const auto& t : ck.tensors) {
            if (t.shape.size() < 2 || !dtype_is_float(t.dtype) || ck.unsupported_types.count(t.name))
                continue;
            if (!o.run.selection.selects(t.name, model::classify_tensor(t.name))) continue;
            const auto* in_base = formats::counterpart(base, ck, t);
            if (!in_base) {
                mismatch(ck, t.path(), t.name, "", "not in the base");
            } else if (!planned.count(in_base) &&
                       o.run.selection.selects(in_base->name, model::classify_tensor(in_base->name))) {
                // The base's tensor is not a matrix this one can be compared with (a vector, another
                // shape, an integer or undecoded type): without this the model's matrix would be
                // dropped without a word.
                mismatch(
                    ck, t.path(), t.name, "",
                    in_base->shape != t.shape
                        ? fmt::format("the base's counterpart '{}' is not a matrix of this shape (expected "
                                      "{}, found {} in the base)",
                                      in_base->name, shape_string(t.shape), shape_string(in_base->shape))
                        : fmt::format("the base's counterpart '{}' has dtype {}, which cannot be compared",
                                      in_base->name, dtype_name(in_base->dtype)));
            }
        }
    }

    const bool f64 = o.precision == Precision::f64;
    const std::uint64_t budget = o.run.resolved_max_memory();
    const std::string config = o.config_key();
    // Results are indexed flat: slot(job, model, unit).
    std::vector<std::size_t> first_slot(jobs.size() + 1, 0);
    for (std::size_t j = 0; j < jobs.size(); ++j)
        first_slot[j + 1] = first_slot[j] + n_models * jobs[j].units.size();
    auto slot = [&](std::size_t j, std::size_t m, std::size_t u) {
        return first_slot[j] + m * jobs[j].units.size() + u;
    };
    // Results are keyed by the content of both tensors they are computed from (rank 0 hashes them).
    std::vector<const TensorInfo*> tensors;
    for (const auto& tj : jobs) tensors.push_back(tj.tensor);
    const ContentIds base_content = job.identify(base, tensors);
    std::vector<ContentIds> content(n_models);
    for (std::size_t m = 0; m < n_models; ++m) {
        tensors.clear();
        for (const auto& tj : jobs)
            if (tj.in_model[m]) tensors.push_back(tj.in_model[m]);
        content[m] = job.identify(*models[m], tensors);
        if (job.store()) job.store()->record_pair(models[m]->name, base.name);
    }
    // Slot (job, model, unit) -> (job, model, unit), for the keys.
    std::vector<std::size_t> slot_job(first_slot.back());
    for (std::size_t j = 0; j < jobs.size(); ++j)
        for (std::size_t i = first_slot[j]; i < first_slot[j + 1]; ++i) slot_job[i] = j;
    // A factored delta is the adapter's exact update, not the rounded merged bytes' difference: it is
    // stored under its own configuration.
    auto key_of = [&](std::size_t i) {
        const std::size_t j = slot_job[i], m = (i - first_slot[j]) / jobs[j].units.size(),
                          u = (i - first_slot[j]) % jobs[j].units.size();
        const bool factored = factored_delta(o, *jobs[j].tensor, *jobs[j].in_model[m]);
        return store::ResultKey{content[m].at(jobs[j].in_model[m]), base_content.at(jobs[j].tensor),
                                jobs[j].units[u].store_block(), factored ? config + ";factored" : config};
    };
    // A slot is compared unless its model lacks the tensor or (for a head block) the heads.
    std::vector<char> compared(first_slot.back(), 0);
    for (std::size_t j = 0; j < jobs.size(); ++j)
        for (std::size_t m = 0; m < n_models; ++m)
            for (std::size_t u = 0; u < jobs[j].units.size(); ++u)
                compared[slot(j, m, u)] =
                    jobs[j].in_model[m] && (!jobs[j].units[u].head || jobs[j].heads_ok[m]);
    job.look_up(compared, key_of, stored_fields(), compare_vector_fields());
    result.reused = job.reused();

    // A task is one base tensor against every model, longest first.
    std::vector<Task> tasks;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
        double flops = 0;
        for (const auto& u : jobs[j].units) flops += u.flops();
        Task t{{},
               {flops * static_cast<double>(n_models + 1),
                job_bytes(jobs[j], f64, o.route, o.delta_only, budget)},
               1};
        for (std::size_t i = first_slot[j]; i < first_slot[j + 1]; ++i) t.slots.push_back(i);
        t.reads.push_back(jobs[j].tensor);
        for (std::size_t m = 0; m < n_models; ++m)
            for (std::size_t u = 0; u < jobs[j].units.size(); ++u)
                if (job.pending(slot(j, m, u))) {
                    t.reads.push_back(jobs[j].in_model[m]);
                    break;
                }
        tasks.push_back(std::move(t));
    }
    job.run(tasks, [&](const Task& task, const Job::Done& done, const Job::Advance&) {
        thread_local auto backend = linalg::make_backend(o.run.device);
        const std::size_t j = slot_job[task.slots.front()];
        const auto& tj = jobs[j];
        std::vector<BaseFactorization> cache(tj.units.size());
        // NaN/Inf entries are counted before anything is factorised or sent to a device: each tensor
        // once, the blocks only of a tensor that has some. A unit with any gets NaN fields.
        std::optional<bool> base_clean;
        for (std::size_t m = 0; m < n_models; ++m) {
            bool any = false;
            std::optional<bool> model_clean;
            for (std::size_t u = 0; u < tj.units.size(); ++u) {
                if (!job.pending(slot(j, m, u))) continue;
                any = true;
                const auto& unit = tj.units[u];
                const auto& mt = *tj.in_model[m];
                if (!base_clean) base_clean = count_nonfinite(*tj.tensor, f64) == 0;
                // A factored delta's merged tensor is never formed: its base and factors are checked.
                if (!model_clean)
                    model_clean = factored_delta(o, *tj.tensor, mt)
                                      ? *base_clean && count_nonfinite(mt.low_rank->a, f64) == 0 &&
                                            count_nonfinite(mt.low_rank->b, f64) == 0
                                      : count_nonfinite(mt, f64) == 0;
                const auto bad = *base_clean && *model_clean
                                     ? NonfinitePair{}
                                     : count_nonfinite_pair(*tj.tensor, mt, unit.block, f64);
                auto fv = bad.either > 0 ? nonfinite_compare_values()
                          : f64          ? compare_unit<double>(o, unit, mt, cache[u], *backend)
                                         : compare_unit<float>(o, unit, mt, cache[u], *backend);
                set_nonfinite_counts(bad, fv);
                done(slot(j, m, u), std::move(fv));
            }
            // This model's pages are no longer needed by this thread: keep resident memory small.
            if (any) tj.in_model[m]->file->dont_need(tj.in_model[m]->offset, tj.in_model[m]->nbytes);
        }
        tj.tensor->file->dont_need(tj.tensor->offset, tj.tensor->nbytes);
    });
    result.computed = job.computed();
    if (!job.is_root()) return result;
    auto& values = job.values();
    for (std::size_t i = 0; i < values.size(); ++i)
        if (job.pending(i) && values[i]->scalars.at(kWholeRouteField) != 0) ++result.whole_route;

    std::vector<std::size_t> row_model;  // the model index of each row
    NonfiniteReport nonfinite_report;
    for (std::size_t m = 0; m < n_models; ++m)
        for (std::size_t j = 0; j < jobs.size(); ++j)
            for (std::size_t u = 0; u < jobs[j].units.size(); ++u) {
                auto& v = values[slot(j, m, u)];
                if (!v) continue;
                v->scalars.erase(kWholeRouteField);
                row_model.push_back(m);
                const auto& unit = jobs[j].units[u];
                auto take = [&](const char* field) {
                    const auto n = static_cast<std::int64_t>(v->scalars[field]);
                    v->scalars.erase(field);
                    return n;
                };
                const auto nonfinite = take(kNonfiniteCountField);
                nonfinite_report.add(*jobs[j].tensor, unit.block, unit.head.has_value(),
                                     take(kNonfiniteBaseField));
                nonfinite_report.add(*jobs[j].in_model[m], unit.block, unit.head.has_value(),
                                     take(kNonfiniteModelField));
                CompareRow row{unit_row(models[m]->name, unit), base.name};
                row.nonfinite_count = nonfinite;
                row.values = std::move(v->scalars);
                result.rows.push_back(std::move(row));
            }
    result.warnings = nonfinite_report.warnings();

    // Per head: the Q, K, V, O block norms (GQA: K/V from the query head's kv group).
    if (o.heads && base.schema.heads) {
        const auto& g = *base.schema.heads;
        auto head_stats = [&](std::size_t model_index) {
            std::map<std::pair<int, int>, HeadStats> stats;
            std::map<std::pair<int, int>, std::pair<double, int>> agree, ks;  // sums and counts
            for (std::size_t r = 0; r < result.rows.size(); ++r) {
                const auto& row = result.rows[r];
                const int p = projection_index(row.role);
                if (row_model[r] != model_index || !row.head || !row.layer || p < 0) continue;
                std::vector<int> query_heads;
                if (p == 1 || p == 2) {
                    for (int h = 0; h < g.n_heads; ++h)
                        if (g.kv_head_of(h) == *row.head) query_heads.push_back(h);
                } else {
                    query_heads.push_back(*row.head);
                }
                const auto& v = row.values;
                for (int h : query_heads) {
                    const std::pair key{*row.layer, h};
                    auto& s = stats[key];
                    s.layer = *row.layer, s.head = h;
                    s.block_norm[p] = v.at("delta_frob_norm");
                    auto& a = agree[key];
                    a.first += 0.5 * (v.at("avg_l_agreement") + v.at("avg_r_agreement")), ++a.second;
                    auto& k = ks[key];
                    k.first += v.at("pl_ks"), ++k.second;
                }
            }
            std::vector<HeadStats> out;
            for (auto& [key, s] : stats) {
                s.agreement = agree[key].first / agree[key].second;
                s.pl_ks = ks[key].first / ks[key].second;
                out.push_back(s);
            }
            return out;
        };
        std::vector<HeadStats> ref_stats;
        if (ref_index >= 0) ref_stats = head_stats(static_cast<std::size_t>(ref_index));
        for (std::size_t m = 0; m < n_models; ++m) {
            if (static_cast<int>(m) == ref_index) continue;
            const auto dom = head_stats(m);
            const auto ranked = rank_heads(dom, ref_index >= 0 ? &ref_stats : nullptr, o.ranking);
            std::map<std::pair<int, int>, const HeadStats*> ref_of;
            for (const auto& r : ref_stats) ref_of[{r.layer, r.head}] = &r;
            for (std::size_t i = 0; i < dom.size(); ++i) {
                HeadRow row;
                row.model = models[m]->name;
                row.reference = ref_index >= 0 ? models[static_cast<std::size_t>(ref_index)]->name : "";
                row.layer = dom[i].layer, row.head = dom[i].head;
                row.kv_head = g.kv_head_of(dom[i].head), row.kv_group_size = g.group_size();
                row.domain = dom[i];
                if (auto it = ref_of.find({dom[i].layer, dom[i].head}); it != ref_of.end())
                    row.ref = *it->second;
                row.ranked = ranked[i];
                result.heads.push_back(row);
            }
        }
    }
    return result;
}

void write_compare_csvs(const CompareResult& r, const std::string& out_dir) {
    std::map<std::string, std::string> files{{"compare.csv", to_csv(compare_table(r))},
                                             {"heads.csv", to_csv(heads_table(r))}};
    if (r.allow_partial) files["skipped.csv"] = to_csv(skipped_table(r));
    write_result_directory(out_dir, files);
}

}  // namespace diffract::run
