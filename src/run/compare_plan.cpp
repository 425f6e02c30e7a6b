// compare's plan: what is compared with what (compare_plan_impl.hpp).
#include <set>

#include <fmt/format.h>

#include "compare_plan_impl.hpp"
#include "diffract/core/error.hpp"

namespace diffract::run {
namespace {

std::string geometry_string(const model::HeadGeometry& g) {
    return fmt::format("{} heads / {} kv heads / head_dim {}", g.n_heads, g.n_kv_heads, g.head_dim);
}

void check_options(const CompareOptions& o) {
    using analysis::HeadOrder;
    if (o.top_k < 1)
        throw InputError(fmt::format("--top-k: expected a positive number of components, found {}", o.top_k));
    if (o.overlap_k < 0)
        throw InputError(fmt::format(
            "--overlap-k: expected 0 (no expert overlaps) or a positive number of components, found {}",
            o.overlap_k));
    if (o.delta_only && (o.ranking.order == HeadOrder::agreement || o.ranking.order == HeadOrder::pl_ks))
        throw InputError(fmt::format("--order {}: the heads' {} is not computed with --delta-only",
                                     analysis::head_order_name(o.ranking.order),
                                     analysis::head_order_name(o.ranking.order)));
    if (o.delta_only && o.route != linalg::SvdRoute::auto_route)
        throw InputError(
            "--svd-route: --delta-only computes each delta's singular values with gesdd "
            "(or from a LoRA adapter's factors); leave --svd-route at auto");
}

// Refuses a mismatch, or records it as skipped (--allow-partial).
struct Mismatches {
    const CompareOptions& o;
    std::vector<SkippedItem>& skipped;
    void operator()(const formats::Checkpoint& ck, const std::string& source, const std::string& tensor,
                    const std::string& block, const std::string& what) const {
        if (!o.allow_partial)
            throw_input_error(source, tensor,
                              o.suggest_allow_partial ? what + " (use --allow-partial to skip it)" : what);
        skipped.push_back({ck.name, tensor, block, error_context(source, tensor, what)});
    }
};

// Whether the model's heads can be compared with the base's: the same geometry and attention layout.
bool heads_match(const formats::Checkpoint& base, const formats::Checkpoint& ck, const Mismatches& mismatch) {
    const auto& bg = *base.schema.heads;
    if (!ck.schema.heads) {
        mismatch(ck, ck.path, "", "heads",
                 fmt::format("head geometry unknown (the base has {})", geometry_string(bg)));
        return false;
    }
    const auto& g = *ck.schema.heads;
    if (g != bg) {
        mismatch(ck, ck.path, "", "heads",
                 fmt::format("head geometry differs from the base (expected {}, found {})",
                             geometry_string(bg), geometry_string(g)));
        return false;
    }
    if (ck.schema.qkv_layout != base.schema.qkv_layout ||
        ck.schema.conv1d_transposed != base.schema.conv1d_transposed) {
        mismatch(ck, ck.path, "", "heads",
                 fmt::format("attention layout differs from the base (expected {}, found {})",
                             base.schema.architecture, ck.schema.architecture));
        return false;
    }
    return true;
}

// Model m's counterpart of each planned base tensor (formats::align).
void align_model(const formats::Checkpoint& base, const formats::Checkpoint& ck, std::size_t m, bool heads_ok,
                 std::vector<TensorJob>& jobs, const Mismatches& mismatch) {
    for (auto& tj : jobs) {
        const auto& name = tj.tensor->name;
        const auto pair = formats::align(ck, base, *tj.tensor);
        switch (pair.issue) {
            case formats::PairIssue::missing:
                mismatch(ck, ck.path, name, "", "missing from this model (present in the base)");
                break;
            case formats::PairIssue::shape:
                mismatch(ck, pair.other->path(), name, "",
                         fmt::format("shape differs from the base (expected {}, found {})",
                                     shape_string(tj.tensor->shape), shape_string(pair.other->shape)));
                break;
            case formats::PairIssue::not_float:
            case formats::PairIssue::undecoded:
                mismatch(ck, pair.other->path(), name, "",
                         fmt::format("dtype {} cannot be compared (the base has {})",
                                     dtype_name(pair.other->dtype), dtype_name(tj.tensor->dtype)));
                break;
            case formats::PairIssue::none:
                tj.in_model[m] = pair.other;
                tj.heads_ok[m] = heads_ok;
                break;
        }
    }
}

// The model's selected matrices the base cannot be compared with: without this they would be dropped
// without a word.
void check_model_extras(const formats::Checkpoint& base, const formats::Checkpoint& ck,
                        const std::set<const TensorInfo*>& planned, const analysis::Selection& selection,
                        const Mismatches& mismatch) {
    for (const auto& t : ck.tensors) {
        if (t.shape.size() < 2 || !dtype_is_float(t.dtype) || ck.unsupported_types.count(t.name) ||
            model::is_quantization_part(t.name))
            continue;
        if (!selection.selects(t.name, model::classify_tensor(t.name))) continue;
        const auto* in_base = formats::counterpart(base, ck, t);
        if (!in_base) {
            mismatch(ck, t.path(), t.name, "", "not in the base");
        } else if (!planned.count(in_base) &&
                   selection.selects(in_base->name, model::classify_tensor(in_base->name))) {
            // The base's tensor is not a matrix this one can be compared with (a vector, another shape,
            // an integer or undecoded type).
            mismatch(ck, t.path(), t.name, "",
                     in_base->shape != t.shape
                         ? fmt::format("the base's counterpart '{}' is not a matrix of this shape (expected "
                                       "{}, found {} in the base)",
                                       in_base->name, shape_string(t.shape), shape_string(in_base->shape))
                         : fmt::format("the base's counterpart '{}' has dtype {}, which cannot be compared",
                                       in_base->name, dtype_name(in_base->dtype)));
        }
    }
}

}  // namespace

std::size_t ComparePlan::slot(std::size_t job, std::size_t model, std::size_t unit) const {
    return first_slot_[job] + model * jobs[job].units.size() + unit;
}

ComparePlan::Where ComparePlan::where(std::size_t slot) const {
    const std::size_t j = slot_job_[slot], n_units = jobs[j].units.size();
    return {j, (slot - first_slot_[j]) / n_units, (slot - first_slot_[j]) % n_units};
}

bool ComparePlan::compared(std::size_t slot) const {
    const auto w = where(slot);
    const auto& tj = jobs[w.job];
    return tj.in_model[w.model] && (!tj.units[w.unit].head || tj.heads_ok[w.model]);
}

SlotSource ComparePlan::source(std::size_t slot) const {
    if (!compared(slot)) return {};
    const auto w = where(slot);
    const auto& tj = jobs[w.job];
    const auto& mt = *tj.in_model[w.model];
    // A factored delta is the adapter's exact update, not the rounded merged bytes' difference: it is
    // stored under its own configuration.
    const bool factored = analysis::factored_delta(settings, *tj.tensor, mt);
    return {models[w.model], &mt, tj.tensor, tj.units[w.unit].store_block(),
            factored ? config_key + ";factored" : config_key};
}

void ComparePlan::index_slots() {
    first_slot_.assign(jobs.size() + 1, 0);
    for (std::size_t j = 0; j < jobs.size(); ++j)
        first_slot_[j + 1] = first_slot_[j] + models.size() * jobs[j].units.size();
    slot_job_.assign(first_slot_.back(), 0);
    for (std::size_t j = 0; j < jobs.size(); ++j)
        for (std::size_t i = first_slot_[j]; i < first_slot_[j + 1]; ++i) slot_job_[i] = j;
}

ComparePlan plan_compare(const CompareOptions& o, std::vector<SkippedItem>& skipped) {
    check_options(o);
    ComparePlan plan;
    plan.base = &o.base;
    plan.settings = o;
    plan.config_key = o.config_key();
    plan.budget = o.run.resolved_max_memory();
    if (o.heads && o.base.schema.heads) plan.ranking = o.ranking;
    for (const auto& m : o.models) plan.models.push_back(&m);
    if (o.reference) {
        plan.models.push_back(&*o.reference);
        plan.ref_index = static_cast<int>(plan.models.size()) - 1;
    }
    if (plan.models.empty())
        throw InputError("compare: give at least one model (or --reference) to compare with the base");

    // The base's units, grouped by tensor (plan_matrices lists a tensor's units together).
    for (auto& u : analysis::plan_matrices(o.base, o.run.selection, o.heads)) {
        if (plan.jobs.empty() || plan.jobs.back().tensor != u.tensor)
            plan.jobs.push_back({u.tensor, {}, {}, {}});
        plan.jobs.back().units.push_back(u);
    }
    if (plan.jobs.empty())
        analysis::throw_nothing_selected(o.base.path, o.run.selection, "no matrix of the base to compare");

    // Every model must match the base: refuse on the first mismatch, or skip and record it.
    const Mismatches mismatch{o, skipped};
    const std::size_t n_models = plan.models.size();
    for (auto& tj : plan.jobs) tj.in_model.assign(n_models, nullptr), tj.heads_ok.assign(n_models, 0);
    std::set<const TensorInfo*> planned;
    for (const auto& tj : plan.jobs) planned.insert(tj.tensor);
    for (std::size_t m = 0; m < n_models; ++m) {
        const auto& ck = *plan.models[m];
        analysis::check_decoded(ck, o.run.selection);
        const bool heads_ok = !(o.heads && o.base.schema.heads) || heads_match(o.base, ck, mismatch);
        align_model(o.base, ck, m, heads_ok, plan.jobs, mismatch);
        check_model_extras(o.base, ck, planned, o.run.selection, mismatch);
    }
    plan.index_slots();
    return plan;
}

}  // namespace diffract::run
