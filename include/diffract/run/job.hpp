// The skeleton every computing job runs (analyze, compare, and through them sweeps and rewind's head
// scores), so that resuming, distribution and memory bounds behave alike everywhere:
//
//   1. refuse two inputs under one name, and an output directory that is, contains or lies inside an
//      input or the store, then open the store (rank 0 only: under MPI the other ranks compute their
//      share and send it);
//   2. identify the tensors each result slot is computed from (its SlotSource) by content
//      (content_identity.hpp) and record the models' names;
//   3. look every slot up in the store by its key (those contents, its block and configuration): a
//      slot whose fields are all there is reused, never recomputed; every rank learns what is left;
//   4. give this rank its share of the pending tasks (longest first, distributed.hpp) and run it on
//      the threads under the memory budget (scheduler.hpp), one BLAS thread per worker, with progress;
//      each task's results are put in the store as soon as it is computed and its inputs are found
//      unchanged (check_unchanged: a killed run loses only the tasks in flight);
//   5. under MPI, the other ranks' results reach rank 0 as each task finishes and are stored then.
//
// The computation itself (what a slot is, how a task computes its slots) is the caller's: the
// analyses are pure functions of opened inputs (analysis/), on the backend the job gives each thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "diffract/core/field_values.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/content_identity.hpp"
#include "diffract/run/options.hpp"
#include "diffract/run/scheduler.hpp"
#include "diffract/store/store.hpp"

namespace diffract::formats {
struct Checkpoint;
}

namespace diffract::run {

// Result slots computed together: one matrix, one tensor with its head blocks, or one base tensor
// against every model. `progress_steps`: how far the progress line moves for the task, by the end of
// it: what the computation advanced itself (resampling draws within a matrix), then the rest.
// `reads`: the tensors the task's computation reads; its results are stored only if these still hold
// the bytes the run identified (a file rewritten in place during the run is bad input, not a result).
struct Task {
    std::vector<std::size_t> slots;
    TaskCost cost;
    std::size_t progress_steps = 1;
    std::vector<const TensorInfo*> reads = {};
};

// The tensors the tasks `share` (indices into `tasks`) read, each once, in the tasks' order then the reads'
// own: the same list on every rank (a matrix and its head blocks are separate tasks reading one tensor).
std::vector<const TensorInfo*> tensors_read(const std::vector<Task>& tasks,
                                            const std::vector<std::size_t>& share);

// What one result slot is computed from, which makes its store key: `tensor` of `model` and, for a
// comparison, `base_tensor` of the job's base; the block of them (MatrixUnit::store_block) and the
// configuration (the options' key).
struct SlotSource {
    const formats::Checkpoint* model = nullptr;
    const TensorInfo* tensor = nullptr;       // null: the slot is not part of the job
    const TensorInfo* base_tensor = nullptr;  // null without a base
    std::string block, config;
};

class Job {
public:
    // Step 1. `label` names the job on the progress line. Its inputs are `base` (compare's; null for
    // analyze) and `models`. Every result row and the store's names are keyed by model name, so one
    // name is one checkpoint: two models under one name (the same checkpoint given twice too), and a
    // model named like the base unless it is the base itself, are refused; so is `run.out` when it
    // is, contains or lies inside an input or the store, and the store inside an input.
    Job(std::string label, const RunOptions& run, const formats::Checkpoint* base,
        const std::vector<const formats::Checkpoint*>& models);

    bool is_root() const;
    store::Store* store() { return store_ ? &*store_ : nullptr; }

    // Step 2. The job has `slots` result slots; `source(i)` says what slot i is computed from (a slot
    // without a tensor is not part of the job). The job identifies every tensor a slot reads, input by
    // input (identify), keys each slot by their content, its block and its configuration, and reuses a
    // stored result that holds `stored_fields(i)`; `vector_fields` are the vector fields of a result put.
    using Source = std::function<SlotSource(std::size_t slot)>;
    using StoredFields = std::function<const std::vector<std::string>&(std::size_t slot)>;
    void look_up(std::size_t slots, const Source& source, const StoredFields& stored_fields,
                 std::vector<std::string> vector_fields);
    // The same where every slot's result holds the same fields.
    void look_up(std::size_t slots, const Source& source, const std::vector<std::string>& stored_fields,
                 std::vector<std::string> vector_fields);
    // (Bounds-checked: a worker whose inputs differ from rank 0's may plan more slots than rank 0's
    // state holds, until the ranks agree to stop.)
    bool pending(std::size_t slot) const { return slot < state_.size() && state_[slot] == kPending; }
    bool active(std::size_t slot) const { return slot < state_.size() && state_[slot] != kInactive; }

    // Steps 4 and 5. `compute` runs one of this rank's tasks (on any worker thread) with that thread's
    // backend on the run's device, hands each computed slot to `done` and may move the progress line by
    // up to the task's progress_steps with `advance`. Only tasks holding a pending slot are run.
    using Done = std::function<void(std::size_t slot, FieldValues values)>;
    using Advance = std::function<void(std::size_t steps)>;
    using Compute =
        std::function<void(const Task&, const Done& done, const Advance& advance, linalg::Backend& backend)>;
    void run(const std::vector<Task>& tasks, const Compute& compute);

    // Every slot's values after run (rank 0): reused or computed; empty for inactive slots.
    std::vector<std::optional<FieldValues>>& values() { return values_; }
    std::size_t computed() const { return computed_; }
    std::size_t reused() const { return reused_; }

private:
    enum : char { kInactive = 0, kPending = 1, kReused = 2 };
    // The content ids of `tensors` of `ck`, recorded in the store under the model's name (rank 0; none
    // on the other ranks, which never build keys). Under MPI every other rank receives rank 0's ids of
    // the same tensors: before computing, it checks that its own copy of each tensor it reads hashes
    // to them (a stale copy on another host would otherwise be computed and stored under rank 0's
    // ids); a mismatch on any rank ends every rank with one InputError naming the rank, host, file and
    // tensor, before anything is computed or stored.
    void identify(const formats::Checkpoint& ck, const std::vector<const TensorInfo*>& tensors);
    void identify_sources(const std::vector<SlotSource>& sources);
    void store_result(std::size_t slot, FieldValues values);
    static std::string encode_ids(const std::vector<const TensorInfo*>& tensors, const ContentIds& ids);
    void take_root_ids(const formats::Checkpoint& ck, const std::vector<const TensorInfo*>& tensors,
                       const std::string& bytes);
    void note_mismatch(std::string what);
    void verify_inputs(const std::vector<Task>& tasks, const std::vector<std::size_t>& mine);
    void agree_on_mismatch();  // collective: every rank throws if any rank noted a mismatch
    // --ship-inputs: rank 0 sends each worker the bytes its share reads (run/shipped_inputs.hpp).
    void ship_inputs(const std::vector<Task>& tasks, const std::vector<std::vector<std::size_t>>& shares);

    // Under MPI, results travel to rank 0 as each task finishes (a killed rank loses only its tasks in
    // flight); meanwhile both sides check the other's liveness (check_ranks_alive: a rank silent for
    // DIFFRACT_RANK_TIMEOUT seconds ends the job with exit 2 naming it).
    enum : int { kTagResults = 1, kTagDone = 3 };
    class Outbox {  // a worker's finished tasks' results, from its compute threads to its main thread
    public:
        void put(std::string bytes) {
            std::lock_guard lock(mu_);
            items_.push_back(std::move(bytes));
        }
        std::vector<std::string> take() {
            std::lock_guard lock(mu_);
            return std::exchange(items_, {});
        }

    private:
        std::mutex mu_;
        std::vector<std::string> items_;
    };
    static std::string encode_task_results(std::size_t task,
                                           const std::vector<std::pair<std::size_t, FieldValues>>& computed);
    void receive_task_results(const std::string& bytes, const std::vector<Task>& tasks,
                              const std::vector<TaskCost>& costs, Progress& progress);
    void exchange(const std::vector<Task>& tasks, const std::vector<TaskCost>& costs,
                  const std::function<void()>& compute_share, std::size_t share_size, Outbox& outbox,
                  Progress& progress);

    std::string label_;
    const RunOptions& run_;
    const formats::Checkpoint* base_;
    std::vector<const formats::Checkpoint*> models_;
    std::optional<store::Store> store_;
    std::vector<store::ResultKey> keys_;  // per slot, rank 0 with a store
    std::vector<std::string> vector_fields_;
    ContentIds ids_;  // every identified tensor's id when the run started: what results are checked against
    std::string state_;  // per slot: kInactive, kPending or kReused (sent between ranks as bytes)
    std::vector<std::optional<FieldValues>> values_;
    std::string mismatch_;  // this rank's first difference from rank 0's inputs ("" for none)
    std::mutex mu_;         // values_ and the counts, from the worker threads
    // Each worker thread's backend, made on that thread when it first computes and kept for this job
    // only (a process running several jobs, as Python does, gets each job's own device).
    linalg::Backend& thread_backend();
    std::mutex backends_mu_;
    std::map<std::thread::id, std::unique_ptr<linalg::Backend>> backends_;
    std::size_t computed_ = 0, reused_ = 0;
};

}  // namespace diffract::run
