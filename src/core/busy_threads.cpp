#include "diffract/core/busy_threads.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <list>
#include <mutex>
#include <thread>

namespace diffract {
namespace {

using Clock = std::chrono::steady_clock;

struct BusyThread {
    clockid_t cpu_clock{};
    long long cpu_ns = -1;    // the CPU time last sampled
    Clock::time_point since;  // when it last changed (or the scope began)
};

std::mutex registry_mu;
std::list<BusyThread> registry;  // stable addresses: each thread keeps its own entry while busy

thread_local int depth = 0;
thread_local std::list<BusyThread>::iterator entry;

long long cpu_nanoseconds(clockid_t clock) {
    timespec ts{};
    if (clock_gettime(clock, &ts) != 0) return -1;
    return static_cast<long long>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

}  // namespace

BusyScope::BusyScope() {
    if (depth++ > 0) return;
    BusyThread t;
    // A thread's own CPU clock: readable from another thread for as long as this one is registered (the
    // entry is removed, under the same lock, before the thread can end).
    if (pthread_getcpuclockid(pthread_self(), &t.cpu_clock) != 0) t.cpu_clock = CLOCK_THREAD_CPUTIME_ID;
    t.cpu_ns = cpu_nanoseconds(t.cpu_clock);
    t.since = Clock::now();
    std::lock_guard lock(registry_mu);
    entry = registry.insert(registry.end(), t);
}

BusyScope::~BusyScope() {
    if (--depth > 0) return;
    std::lock_guard lock(registry_mu);
    registry.erase(entry);
}

double longest_busy_idle_seconds() {
    const auto now = Clock::now();
    double longest = 0;
    std::lock_guard lock(registry_mu);
    for (auto& t : registry) {
        if (const auto ns = cpu_nanoseconds(t.cpu_clock); ns != t.cpu_ns) {
            t.cpu_ns = ns;
            t.since = now;
        }
        longest = std::max(longest, std::chrono::duration<double>(now - t.since).count());
    }
    return longest;
}

void test_fault_block_reads() {
    static const bool block = std::getenv("DIFFRACT_TEST_BLOCK_READS") != nullptr;
    if (!block) return;
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace diffract
