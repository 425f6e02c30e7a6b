// The options every computing job shares (threads, memory budget, store, device, selection, progress,
// output directory) and the one place that reads them from the text the CLI and Python are given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diffract/analysis/selection.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::formats {
struct Checkpoint;
}

namespace diffract::run {

struct RunOptions {
    int threads = 0;               // 0: hardware concurrency
    std::uint64_t max_memory = 0;  // 0: half of physical memory
    std::string store_path;        // "" : ./.diffract/results.sqlite
    linalg::Device device = linalg::Device::cpu;
    analysis::Selection selection;
    bool progress = true;
    ProgressSink progress_sink;  // a front end's own progress display (replaces the stderr line)
    // The result directory the caller will write ("" for none): checked against the inputs and the
    // store before anything is computed (check_output_path).
    std::string out;
    // Under MPI: rank 0 sends each worker the bytes of its share of the inputs (run/shipped_inputs.hpp),
    // for workers that cannot read them (--ship-inputs).
    bool ship_inputs = false;
    int resolved_threads() const;
    std::uint64_t resolved_max_memory() const;
    std::string resolved_store() const;  // store_path, or the default store
};

// The store a run uses: `given` (--store), or the default store (./.diffract/results.sqlite) when empty.
std::string resolved_store_path(const std::string& given);

// The run options as the CLI and Python spell them (--threads, --max-memory 8G, --roles a,b, ...),
// validated into RunOptions in one place so that both front ends accept and refuse alike.
struct RunOptionText : analysis::SelectionText {
    int threads = 0;
    std::string max_memory, store, device = "cpu";
    int quiet = 0;  // 1 (--quiet): no progress display; 2 (--quiet --quiet): no summary line either
    bool ship_inputs = false;
};
RunOptions parse_run_options(const RunOptionText& text);

}  // namespace diffract::run
