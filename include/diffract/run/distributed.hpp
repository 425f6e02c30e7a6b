// Several processes on one job (`mpirun -np N diffract analyze ...`): each rank computes a balanced
// share of the matrices (by flop estimate) reading only its own tensors, and rank 0 gathers the
// results into the one store and writes the outputs. Without MPI (or outside mpirun) there is one
// rank and every function is trivial; nothing above this interface includes MPI.
#pragma once

#include <string>
#include <vector>

#include "diffract/run/scheduler.hpp"

namespace diffract::run {

struct Distributed {
    int rank = 0;
    int size = 1;
    bool is_root() const { return rank == 0; }
};

// Initialises MPI when the process was started by an MPI launcher (and the build has MPI).
void distributed_init(int* argc, char*** argv);
void distributed_finalize();
// Ends every rank with `code` (after a failure on one rank).
[[noreturn]] void distributed_abort(int code);
const Distributed& distributed();

// Which tasks this rank runs: greedy longest-processing-time assignment of the tasks with
// `needed[i]` set, identical on every rank. Returns this rank's task indices.
std::vector<std::size_t> assign_tasks(const std::vector<TaskCost>& costs, const std::vector<char>& needed);

// Rank 0's `bytes` on every rank.
void broadcast_bytes(std::string& bytes);
// Every rank's `mine`, at rank 0 (in rank order); empty on the other ranks.
std::vector<std::string> gather_bytes(const std::string& mine);

}  // namespace diffract::run
