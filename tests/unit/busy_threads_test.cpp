// core/busy_threads.hpp: a busy thread that waits without using CPU (as on a page of a dead network
// filesystem) shows its idle time; one that computes does not; a thread outside any scope is not watched.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "diffract/core/busy_threads.hpp"

namespace diffract {
namespace {

using namespace std::chrono_literals;

TEST(BusyThreads, NoneBusyIsZero) { EXPECT_EQ(longest_busy_idle_seconds(), 0.0); }

TEST(BusyThreads, ABusyThreadBlockedInTheKernelShowsItsIdleTime) {
    std::atomic<bool> blocked{false};
    std::mutex never;
    never.lock();
    std::thread waiter([&] {
        const BusyScope busy;
        blocked = true;
        never.lock();  // waits in the kernel without CPU, as a page fault on a dead mount does
        never.unlock();
    });
    while (!blocked) std::this_thread::yield();
    std::this_thread::sleep_for(50ms);
    longest_busy_idle_seconds();
    std::this_thread::sleep_for(400ms);
    const double idle = longest_busy_idle_seconds();
    EXPECT_GE(idle, 0.3);
    EXPECT_LT(idle, 5.0);
    never.unlock();
    waiter.join();
    EXPECT_EQ(longest_busy_idle_seconds(), 0.0);
}

TEST(BusyThreads, AComputingThreadIsNeverIdle) {
    std::atomic<bool> started{false}, stop{false};
    std::thread worker([&] {
        const BusyScope busy;
        const BusyScope nested;  // counts once
        started = true;
        volatile double x = 1;
        while (!stop) x = std::sqrt(x + 1);
    });
    while (!started) std::this_thread::yield();
    double longest = 0;
    for (int i = 0; i < 5; ++i) {
        std::this_thread::sleep_for(100ms);
        longest = std::max(longest, longest_busy_idle_seconds());
    }
    stop = true;
    worker.join();
    // Between two samples 100 ms apart a spinning thread always used CPU (on a loaded machine it may be
    // descheduled for a while, never for a second).
    EXPECT_LT(longest, 1.0);
}

}  // namespace
}  // namespace diffract
