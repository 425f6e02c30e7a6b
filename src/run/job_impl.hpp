// What run::Job's files share (job.cpp: the skeleton; job_inputs.cpp: the inputs' names, identities and
// their verification across ranks; job_exchange.cpp: shipping inputs and gathering results under MPI;
// job_test_hooks.cpp: the fault injection the distributed tests set by environment variable).
#pragma once

#include <cstddef>
#include <vector>

#include "diffract/run/job.hpp"
#include "diffract/run/options.hpp"

namespace diffract::run::detail {

// One name per checkpoint: every result row and the store's names are keyed by model name. Then, on
// rank 0 (which writes), no output over an input: `run.out` is not, does not contain and does not lie
// inside an input or the store, and the store is not inside an input.
void check_inputs_and_output(const RunOptions& run, const formats::Checkpoint* base,
                             const std::vector<const formats::Checkpoint*>& models, bool root);

// Fault injection for the tests of a worker killed late (DIFFRACT_TEST_KILL_AFTER_RESULTS=N): after
// sending N of its `share` tasks' results (N < 0: all but -N of them) this rank waits a second (so
// that they reach rank 0) and kills itself.
void fault_after_sent(std::size_t sent, std::size_t share);
// Fault injection for the tests of a rank stopped while a job starts (DIFFRACT_TEST_STOP_IN_IDENTIFY set in
// that rank's environment): it stops itself (SIGSTOP) as it identifies its inputs, as a frozen host would.
void fault_stop_in_identify();

}  // namespace diffract::run::detail
