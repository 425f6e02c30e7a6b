// Threads doing a job's work, watched by the CPU time they use. A thread that should be computing but
// uses no CPU for a long time is blocked: typically on a page of a memory-mapped input whose network
// filesystem went away. A heartbeat sent by another thread of the same process would hide that, so under
// MPI each rank's liveness thread samples these (run/distributed.hpp) and a rank whose busy thread has
// been idle past the timeout is reported, by its rank and host, instead of waited on for ever.
#pragma once

namespace diffract {

// While it lives, the calling thread counts as busy (nested scopes count once). A scope belongs around
// work that uses the CPU or reads inputs, never around a wait for other threads.
class BusyScope {
public:
    BusyScope();
    ~BusyScope();
    BusyScope(const BusyScope&) = delete;
    BusyScope& operator=(const BusyScope&) = delete;
};

// The longest time, in seconds, that a thread busy now has used no CPU (0 when none is busy). Each call
// samples every busy thread's CPU clock, so it is meant to be called every second or so.
double longest_busy_idle_seconds();

// Fault injection for the tests of a blocked input (DIFFRACT_TEST_BLOCK_READS set): the calling thread
// sleeps for ever, without using CPU, as a read of a page from a dead network filesystem does.
void test_fault_block_reads();

}  // namespace diffract
