// Inputs that sit only on rank 0's host (--ship-inputs: cloud VMs without a shared disk). Rank 0 sends
// each worker what it needs of them, in two steps:
//   1. open_input: the skeleton of every input, before anything is planned — each file of it, with the
//      bytes of its tensors left as holes (a sparse file the size of the original), and the small files
//      beside it (config.json, ...) whole. Workers write it under a staging directory and open it there:
//      their plan is rank 0's, from the same headers.
//   2. ship_task_inputs: once the tasks are shared out, the stored bytes of every tensor a worker's tasks
//      read, written into its skeleton at their offsets.
// The workers then verify their share against rank 0's content ids as always (Job::verify_inputs), so a
// skeleton that planned differently is caught, never computed. The staged files ($TMPDIR) hold the
// worker's share of the bytes; their directory is removed as soon as they are open, so a killed worker
// leaves nothing behind.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/job.hpp"

namespace diffract::run {

// Opens the checkpoint `spec` names. When `shipped` and there are several ranks, rank 0 opens it as given
// and sends its skeleton to every other rank, which opens that: collective, every rank calls it for the
// same specs in the same order.
formats::Checkpoint open_input(const std::string& spec, bool shipped);

// Rank 0 sends every worker the stored bytes of the tensors its tasks read (`shares[r]`: the indices of
// rank r's tasks); each worker writes them into its skeleton. Collective. Returns, on rank 0, the bytes
// sent (0 elsewhere).
std::size_t ship_task_inputs(const std::vector<Task>& tasks,
                             const std::vector<std::vector<std::size_t>>& shares);

}  // namespace diffract::run
