#include "diffract/run/options.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "diffract/core/byte_size.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/distributed.hpp"
#include "diffract/run/scheduler.hpp"
#include "diffract/store/store.hpp"

namespace diffract::run {

int RunOptions::resolved_threads() const {
    if (threads > 0) return threads;
    // The cores this process may run on (taskset, cgroups' cpusets, an MPI launcher's binding of the
    // rank), not the machine's: more threads than those only take turns.
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::uint64_t RunOptions::resolved_max_memory() const {
    // Half the machine's memory, shared among the ranks running on it.
    return max_memory > 0 ? max_memory
                          : physical_memory_bytes() / 2 /
                                static_cast<std::uint64_t>(std::max(1, distributed().local_size));
}

std::string resolved_store_path(const std::string& given) { return store::store_path_or_default(given); }

std::string RunOptions::resolved_store() const { return resolved_store_path(store_path); }

RunOptions parse_run_options(const RunOptionText& t) {
    RunOptions r;
    if (t.threads < 0)
        throw InputError(fmt::format(
            "--threads: {} is not a thread count (a positive number, or 0 for all cores)", t.threads));
    r.threads = t.threads;
    r.max_memory = t.max_memory.empty() ? 0 : parse_size(t.max_memory, "--max-memory");
    r.store_path = t.store;
    r.device = linalg::parse_device(t.device);  // checked even when every result turns out to be stored
    r.progress = !t.quiet;
    r.ship_inputs = t.ship_inputs;
    r.selection = analysis::make_selection(t);
    return r;
}

}  // namespace diffract::run
