// The scheduler: running independent tasks on a fixed number of threads under a memory budget.
//
// Tasks start in order of decreasing cost (longest first keeps both cores busy to the end); a task
// is admitted only while the estimated bytes in flight stay under the budget (one task always runs,
// whatever its size, so a budget below the largest matrix degrades to serial, not to a deadlock).
// The first exception stops new tasks and is rethrown after the running ones finish. A sixteenth of the
// budget (at most 1 GiB) holds the work buffers recycled between tasks (core/buffer_pool.hpp), emptied
// when the tasks are done.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace diffract::run {

struct TaskCost {
    double cost = 1;          // relative run time
    std::uint64_t bytes = 0;  // peak working memory
};

void run_tasks(const std::vector<TaskCost>& costs, int threads, std::uint64_t max_bytes,
               const std::function<void(std::size_t index)>& run);

// Total physical memory, for the default budget.
std::uint64_t physical_memory_bytes();

}  // namespace diffract::run
