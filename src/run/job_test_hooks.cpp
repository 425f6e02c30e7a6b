// The fault injection of the distributed tests (job_impl.hpp): inert unless their environment variables
// are set.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "job_impl.hpp"

namespace diffract::run::detail {

void fault_after_sent(std::size_t sent, std::size_t share) {
    static const long kill_after = [] {
        const char* v = std::getenv("DIFFRACT_TEST_KILL_AFTER_RESULTS");
        return v ? std::strtol(v, nullptr, 10) : 0L;
    }();
    if (kill_after == 0) return;
    const long at = kill_after > 0 ? kill_after : static_cast<long>(share) + kill_after;
    if (static_cast<long>(sent) < std::max(at, 1L)) return;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::raise(SIGKILL);
}

void fault_stop_in_identify() {
    static const bool stop = std::getenv("DIFFRACT_TEST_STOP_IN_IDENTIFY") != nullptr;
    if (stop) std::raise(SIGSTOP);
}

}  // namespace diffract::run::detail
