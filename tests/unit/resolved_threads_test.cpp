// The default thread count follows the cores this process may run on (taskset, cpusets, an MPI
// launcher's binding), not the machine's core count.
#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

#include "diffract/run/options.hpp"

TEST(ResolvedThreads, FollowTheAffinityMask) {
    cpu_set_t all;
    CPU_ZERO(&all);
    ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    diffract::run::RunOptions o;
    EXPECT_EQ(o.resolved_threads(), CPU_COUNT(&all));
    // Bound to one of its cores, as `taskset -c N` or an MPI rank bound to a core.
    int first = 0;
    while (!CPU_ISSET(first, &all)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    const int bound = o.resolved_threads();
    ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
    EXPECT_EQ(bound, 1);
    o.threads = 3;  // an explicit --threads wins
    EXPECT_EQ(o.resolved_threads(), 3);
}
