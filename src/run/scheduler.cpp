#include "diffract/run/scheduler.hpp"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "diffract/core/buffer_pool.hpp"
#include "diffract/core/busy_threads.hpp"
#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"

namespace diffract::run {
namespace {

// The work buffers freed by finished tasks are recycled (core/buffer_pool.hpp) up to a sixteenth of the
// budget, at most this; that capacity is taken out of what the tasks may reserve.
constexpr std::uint64_t kMaxPoolBytes = std::uint64_t{1} << 30;

}  // namespace

void run_tasks(const std::vector<TaskCost>& costs, int threads, std::uint64_t max_bytes,
               const std::function<void(std::size_t)>& run) {
    std::vector<std::size_t> order(costs.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](auto a, auto b) { return costs[a].cost > costs[b].cost; });
    const std::uint64_t pool_bytes = std::min(kMaxPoolBytes, max_bytes / 16);
    const std::uint64_t task_bytes = max_bytes - pool_bytes;
    std::optional<BufferPoolScope> recycled;  // a run without a budget (hashing) leaves the pool alone
    if (pool_bytes > 0) recycled.emplace(pool_bytes);
    std::mutex mu;
    std::condition_variable cv;
    std::size_t next = 0;
    std::uint64_t in_flight_bytes = 0;
    int in_flight = 0;
    std::exception_ptr error;
    auto worker = [&] {
        while (true) {
            std::size_t index;
            {
                std::unique_lock lock(mu);
                cv.wait(lock, [&] {
                    if (error || next >= order.size()) return true;
                    return in_flight == 0 || in_flight_bytes + costs[order[next]].bytes <= task_bytes;
                });
                if (error || next >= order.size()) return;
                index = order[next++];
                in_flight_bytes += costs[index].bytes;
                ++in_flight;
            }
            try {
                throw_if_cancelled();  // Ctrl-C from Python stops every command between tasks
                const BusyScope working;
                run(index);
            } catch (...) {
                std::lock_guard lock(mu);
                if (!error) error = std::current_exception();
            }
            {
                std::lock_guard lock(mu);
                in_flight_bytes -= costs[index].bytes;
                --in_flight;
            }
            cv.notify_all();
        }
    };
    const int n = std::max(1, std::min<int>(threads, static_cast<int>(costs.size())));
    std::vector<std::thread> pool;
    for (int i = 1; i < n; ++i) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    if (error) std::rethrow_exception(error);
}

std::uint64_t physical_memory_bytes() {
    return static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
           static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace diffract::run
