#include "diffract/analysis/analyze.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "diffract/analysis/custom_fields.hpp"
#include "diffract/analysis/fit_status.hpp"
#include "diffract/analysis/matrix_plan.hpp"
#include "diffract/core/atomic_file.hpp"
#include "diffract/core/cancel.hpp"
#include "diffract/core/csv_field.hpp"
#include "diffract/core/distributed.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/nonfinite.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/core/parallel.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/formats/memory_checkpoint.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/store/content_id.hpp"
#include "diffract/store/store.hpp"
#include "field_values_io_impl.hpp"
#include "nonfinite_report_impl.hpp"

namespace diffract::analysis {

int RunOptions::resolved_threads() const {
    return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::uint64_t RunOptions::resolved_max_memory() const {
    return max_memory > 0 ? max_memory : physical_memory_bytes() / 2;
}

std::string RunOptions::resolved_store() const { return store::store_path_or_default(store_path); }

void check_run_output(const RunOptions& run, const std::vector<formats::Checkpoint>& inputs) {
    if (run.out.empty()) return;
    std::vector<std::string> protected_paths{run.resolved_store()};
    for (const auto& ck : inputs) protected_paths.push_back(ck.path);
    check_output_path(run.out, protected_paths);
}

RunOptions parse_run_options(const RunOptionText& t) {
    RunOptions r;
    r.threads = t.threads;
    r.max_memory = t.max_memory.empty() ? 0 : parse_size(t.max_memory, "--max-memory");
    r.store_path = t.store;
    linalg::check_device(t.device);  // even when every result turns out to be stored
    r.device = t.device;
    r.progress = !t.quiet;
    r.selection = make_selection(t.roles, t.layers, t.match, t.exclude);
    return r;
}

std::string format_value(double v) {
    if (std::isnan(v)) return "nan";
    return fmt::format("{}", v);
}

namespace {

// Fields every analysis computes besides the requested ones: the aggregates need the norms, and
// the singular values are kept in the store for compare to reuse.
const std::vector<std::string> kAlwaysStored = {"frob_norm", "l2_norm"};
const std::vector<std::string> kStoredVectors = {"weights_svals"};

struct Job {
    std::size_t model;
    MatrixUnit unit;
};

// The pending jobs, in job order, one task each or, `by_tensor`, grouped by (model, tensor).
std::vector<std::vector<std::size_t>> make_tasks(const std::vector<Job>& jobs, const std::string& needed,
                                                 bool by_tensor) {
    std::vector<std::vector<std::size_t>> tasks;
    std::map<std::pair<std::size_t, const TensorInfo*>, std::size_t> index;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        if (!needed[i]) continue;
        if (!by_tensor) {
            tasks.push_back({i});
            continue;
        }
        const auto [it, fresh] = index.try_emplace({jobs[i].model, jobs[i].unit.tensor}, tasks.size());
        if (fresh) tasks.emplace_back();
        tasks[it->second].push_back(i);
    }
    return tasks;
}

// Run time: the units' SVD flops. Memory: the largest unit's working set, plus, for a batch, the
// tensor decoded once as f64 (and as f32 on its way there: 12 bytes an element).
TaskCost task_cost(const std::vector<Job>& jobs, const std::vector<std::size_t>& task, bool f64) {
    TaskCost c{0, 0};
    for (auto i : task) {
        c.cost += jobs[i].unit.flops();
        c.bytes = std::max(c.bytes, jobs[i].unit.bytes(f64));
    }
    if (task.size() > 1) c.bytes += 12 * static_cast<std::uint64_t>(jobs[task.front()].unit.tensor->numel());
    return c;
}

// `nonfinite`: the unit's NaN/Inf entries when counted already (a task whose values are computed in
// advance), else they are counted here in the entries read. A unit with any is never factorised: its
// fields are NaN (nonfinite_field_values).
template <typename T>
FieldValues compute_unit(const MatrixUnit& unit, std::optional<std::vector<double>> singular_values,
                         std::optional<std::int64_t> nonfinite, const std::vector<std::string>& fields,
                         const KernelConfig& kernel, linalg::Backend& backend) {
    const TensorScope scope(unit.tensor->path(), unit.tensor->name);
    std::optional<Matrix<T>> w;
    if (!nonfinite) {
        w = read_matrix<T>(*unit.tensor, unit.block);
        nonfinite = count_nonfinite(std::span<const T>(w->data));
    }
    if (*nonfinite > 0) return nonfinite_field_values(fields, *nonfinite);
    MatrixInput<T> input;
    input.rows = unit.block.logical_rows();
    input.cols = unit.block.logical_cols();
    if (w)
        input.in_memory = &*w;
    else
        input.read = [&unit] { return read_matrix<T>(*unit.tensor, unit.block); };
    input.singular_values = std::move(singular_values);
    auto values = compute_fields(std::move(input), fields, kernel, backend);
    values.scalars[kNonfiniteCountField] = 0;
    return values;
}

}  // namespace

AnalyzeResult analyze(const AnalyzeOptions& o) {
    // Checked here so that the CLI and Python refuse alike.
    if (o.kernel.min_fit_size < 0)
        throw InputError(
            fmt::format("--min-fit-size: expected an integer >= 0, found {}", o.kernel.min_fit_size));
    if (o.kernel.null_draws < 1 || o.kernel.null_draws > 10000)
        throw InputError(fmt::format("--null-draws: expected a number of draws in [1, 10000], found {}",
                                     o.kernel.null_draws));
    if (o.kernel.alpha_ci_draws < 0)
        throw InputError(
            fmt::format("--alpha-ci: expected a number of draws >= 0, found {}", o.kernel.alpha_ci_draws));
    AnalyzeResult result;
    std::vector<std::string> wanted;
    for (const auto& f : field_catalog()) {
        if (std::find(o.metrics.begin(), o.metrics.end(), f.name) == o.metrics.end()) continue;
        if (f.level == Level::parameter)
            result.fields.emplace_back(f.name);  // metrics.csv columns
        else if (f.level == Level::in_model)
            wanted.emplace_back(f.inputs);  // an aggregate: the per-matrix field it is computed from
    }
    wanted.insert(wanted.begin(), result.fields.begin(), result.fields.end());
    for (const auto& f : kAlwaysStored) wanted.push_back(f);
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    std::vector<std::string> stored_check = wanted;
    stored_check.insert(stored_check.end(), kStoredVectors.begin(), kStoredVectors.end());
    std::vector<std::string> compute_list = stored_check;
    stored_check.emplace_back(kNonfiniteCountField);  // reused results keep their count of NaN/Inf entries
    // Registered custom fields named in metrics: computed after the built-in ones, own columns.
    const auto custom = custom_fields_in(o.metrics);
    for (const auto& f : custom) result.fields.push_back(f.name);

    std::vector<formats::Checkpoint> models;
    for (const auto& spec : o.models) models.push_back(formats::open_model(spec));
    // Under MPI only rank 0 touches the store; the other ranks compute their share and send it.
    const auto& dist = distributed();
    if (dist.is_root()) check_run_output(o.run, models);
    std::optional<store::Store> db;
    if (dist.is_root()) db.emplace(o.run.resolved_store());
    const std::string config = o.kernel.key();

    std::vector<Job> jobs;
    for (std::size_t m = 0; m < models.size(); ++m)
        for (auto& u : plan_matrices(models[m], o.run.selection, o.heads)) jobs.push_back({m, u});
    // Results are keyed by the content of the tensors they are computed from (rank 0 hashes them).
    store::ContentIds content;
    if (db)
        for (std::size_t m = 0; m < models.size(); ++m) {
            std::vector<const TensorInfo*> tensors;
            for (const auto& j : jobs)
                if (j.model == m) tensors.push_back(j.unit.tensor);
            content.merge(
                store::identify_model(*db, models[m], tensors, o.run.resolved_threads(), o.run.progress));
        }
    auto key_of = [&](std::size_t i) {
        return store::ResultKey{content.at(jobs[i].unit.tensor), "", jobs[i].unit.store_block(), config};
    };

    std::vector<FieldValues> values(jobs.size());
    const bool f64 = o.kernel.precision == Precision::f64;

    // What the store already holds is reused; every rank learns what is left to compute.
    std::string needed(jobs.size(), 1);
    if (db) {
        for (std::size_t i = 0; i < jobs.size(); ++i) {
            if (auto hit = db->get(key_of(i), stored_check)) {
                values[i] = std::move(*hit);
                needed[i] = 0;
                ++result.reused;
            }
        }
    }
    broadcast_bytes(needed);

    // On a device a task is one stored tensor's pending units (its whole matrix and its heads): the
    // tensor is uploaded once at its storage width and the blocks' singular values computed
    // together, the heads as one batch. On the CPU that gains nothing (bench_analyze: 0.9× on the
    // heads) and whole-tensor tasks balance worse over the threads (1.7% more wall time on a 4-layer
    // 1024-wide family), so there a task is one matrix, as it always was.
    const bool by_tensor = o.tensor_tasks.value_or(o.run.device != "cpu");
    const auto tasks = make_tasks(jobs, needed, by_tensor);
    std::vector<TaskCost> costs;
    for (const auto& task : tasks) costs.push_back(task_cost(jobs, task, f64));
    const auto mine = assign_tasks(costs, std::vector<char>(tasks.size(), 1));
    std::vector<TaskCost> my_costs;
    std::size_t my_units = 0;
    for (auto t : mine) my_costs.push_back(costs[t]), my_units += tasks[t].size();

    const int threads = o.run.resolved_threads();
    // One BLAS thread per worker: parallelism comes from matrices in flight, and results do not
    // depend on the thread or rank count (a threaded BLAS may sum in a different order).
    linalg::set_blas_threads(1);
    // Values computed in advance serve every metric but singular vectors.
    const bool precompute = by_tensor && !fields_need_vectors(compute_list);
    std::mutex count_mu;
    Progress progress("analyze", my_units, o.run.progress && dist.is_root(), o.run.progress_sink);
    run_tasks(my_costs, threads, o.run.resolved_max_memory(), [&](std::size_t t) {
        thread_local auto backend = linalg::make_backend(o.run.device);
        const auto& task = tasks[mine[t]];
        const auto& tensor = *jobs[task.front()].unit.tensor;
        std::vector<std::optional<std::vector<double>>> svals(task.size());
        std::vector<std::optional<std::int64_t>> nonfinite(task.size());
        if (precompute) {
            // NaN/Inf entries are counted before the device (or the batch) sees the tensor: the whole
            // tensor once, its blocks only when it has some; blocks with any stay out of the batch.
            const bool clean = count_nonfinite(tensor, f64) == 0;
            std::vector<MatrixBlock> blocks;
            std::vector<std::size_t> batched;
            for (std::size_t k = 0; k < task.size(); ++k) {
                nonfinite[k] = clean ? 0 : count_nonfinite(tensor, jobs[task[k]].unit.block, f64);
                if (*nonfinite[k] == 0) blocks.push_back(jobs[task[k]].unit.block), batched.push_back(k);
            }
            const TensorScope scope(tensor.path(), tensor.name);
            auto s = blocks.empty() ? std::vector<std::vector<double>>{}
                                    : backend->block_singular_values(tensor, blocks, f64, o.kernel.route);
            for (std::size_t b = 0; b < batched.size(); ++b) svals[batched[b]] = std::move(s[b]);
        }
        for (std::size_t k = 0; k < task.size(); ++k) {
            const std::size_t i = task[k];
            const auto& unit = jobs[i].unit;
            values[i] = f64 ? compute_unit<double>(unit, std::move(svals[k]), nonfinite[k], compute_list,
                                                   o.kernel, *backend)
                            : compute_unit<float>(unit, std::move(svals[k]), nonfinite[k], compute_list,
                                                  o.kernel, *backend);
            if (db) db->put(key_of(i), values[i], kStoredVectors);
            {
                std::lock_guard lock(count_mu);
                ++result.computed;
            }
            progress.advance();
        }
        // The tensor's pages are no longer needed by this thread: keep resident memory small.
        tensor.file->dont_need(tensor.offset, tensor.nbytes);
    });
    progress.finish();

    // Rank 0 gathers the other ranks' results into the store.
    std::string payload;
    if (!dist.is_root())
        for (auto t : mine)
            for (auto i : tasks[t]) payload += serialize_field_values(i, values[i]);
    for (const auto& bytes : gather_bytes(payload)) {
        if (!db) break;
        for (auto& [i, v] : parse_field_values(bytes)) {
            db->put(key_of(i), v, kStoredVectors);
            values[i] = std::move(v);
            ++result.computed;
        }
    }
    if (!dist.is_root()) return result;
    if (!custom.empty())
        for (std::size_t i = 0; i < jobs.size(); ++i) {
            throw_if_cancelled();
            if (values[i].scalars[kNonfiniteCountField] > 0) {  // never handed NaN/Inf data: NaN
                for (const auto& f : custom) values[i].scalars[f.name] = std::nan("");
                continue;
            }
            apply_custom_fields(custom, *db, key_of(i), *jobs[i].unit.tensor, jobs[i].unit.block, values[i]);
        }

    NonfiniteReport nonfinite_report;
    for (std::size_t i = 0; i < jobs.size(); ++i)
        nonfinite_report.add(*jobs[i].unit.tensor, jobs[i].unit.block, jobs[i].unit.head.has_value(),
                             static_cast<std::int64_t>(values[i].scalars[kNonfiniteCountField]));
    result.warnings = nonfinite_report.warnings();
    std::vector<std::vector<FieldValues>> whole(models.size());
    result.convention = o.convention;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        const auto& j = jobs[i];
        if (o.convention == Convention::weightwatcher && !j.unit.head) {
            // numpy's matrix_rank threshold uses the eps of the array it decomposes: WeightWatcher
            // casts the weights to f64 (W.astype(float)), as our default precision does.
            const double eps =
                f64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
            const auto it = values[i].vectors.find("weights_svals");
            const std::vector<double> none;
            result.weightwatcher.push_back(weightwatcher_row(
                static_cast<int>(result.weightwatcher.size()), j.unit.tensor->name,
                j.unit.block.logical_rows(), j.unit.block.logical_cols(),
                it == values[i].vectors.end() || values[i].scalars[kNonfiniteCountField] > 0 ? none
                                                                                             : it->second,
                eps));
        }
        MetricRow row{models[j.model].name,
                      j.unit.tensor->name,
                      j.unit.layer,
                      std::string(model::role_name(j.unit.role)),
                      j.unit.head,
                      j.unit.block.logical_rows(),
                      j.unit.block.logical_cols(),
                      0,
                      {}};
        for (const auto& f : result.fields) {
            auto it = values[i].scalars.find(f);
            row.values[f] = it == values[i].scalars.end() ? std::nan("") : it->second;
        }
        row.nonfinite_count = static_cast<std::int64_t>(values[i].scalars[kNonfiniteCountField]);
        result.rows.push_back(std::move(row));
        if (!j.unit.head) whole[j.model].push_back(std::move(values[i]));
    }
    for (std::size_t m = 0; m < models.size(); ++m)
        result.aggregates.emplace_back(models[m].name, model_aggregates(whole[m]));
    return result;
}

void write_result_directory(const std::string& out_dir, const std::map<std::string, std::string>& files) {
    static const std::vector<std::string> kResultFiles = {
        "metrics.csv", "aggregates.csv", "compare.csv", "heads.csv", "skipped.csv", "weightwatcher.csv"};
    write_directory_atomically(
        out_dir,
        [&](const std::string& tmp) {
            for (const auto& [name, contents] : files)
                write_file_fully((std::filesystem::path(tmp) / name).string(), contents);
        },
        ExistingOutput::replace, kResultFiles);
}

void write_analyze_csvs(const AnalyzeResult& r, const std::string& out_dir) {
    std::string csv = "model,tensor,layer,role,head,rows,cols,nonfinite_count";
    for (const auto& f : r.fields) csv += "," + f;
    csv += "\n";
    for (const auto& row : r.rows) {
        csv +=
            fmt::format("{},{},{},{},{},{},{},{}", csv_field(row.model), csv_field(row.tensor),
                        row.layer ? std::to_string(*row.layer) : "", row.role,
                        row.head ? std::to_string(*row.head) : "", row.rows, row.cols, row.nonfinite_count);
        for (const auto& f : r.fields)
            csv += "," + (is_status_field(f) ? std::string(fit_status_name(row.values.at(f)))
                                             : format_value(row.values.at(f)));
        csv += "\n";
    }
    std::string agg = "model";
    std::vector<std::string> agg_fields;
    for (const auto& f : field_catalog())
        if (f.level == Level::in_model) agg_fields.emplace_back(f.name), agg += "," + std::string(f.name);
    agg += "\n";
    for (const auto& [model, values] : r.aggregates) {
        agg += csv_field(model);
        for (const auto& f : agg_fields) agg += "," + format_value(values.at(f));
        agg += "\n";
    }
    std::map<std::string, std::string> files{{"metrics.csv", csv}, {"aggregates.csv", agg}};
    if (r.convention == Convention::weightwatcher)
        files["weightwatcher.csv"] = weightwatcher_csv(r.weightwatcher);
    write_result_directory(out_dir, files);
}

}  // namespace diffract::analysis
