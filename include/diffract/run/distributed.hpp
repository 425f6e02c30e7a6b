// Several processes on one job (`mpirun -np N diffract analyze ...`): each rank computes a balanced
// share of the matrices (by flop estimate) reading only its own tensors, and rank 0 gathers the
// results into the one store and writes the outputs. Without MPI (or outside mpirun) there is one
// rank and every function is trivial; nothing above this interface includes MPI.
#pragma once

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "diffract/run/scheduler.hpp"

namespace diffract::run {

struct Distributed {
    int rank = 0;
    int size = 1;
    int local_size = 1;  // ranks on this rank's machine (they share its memory)
    bool is_root() const { return rank == 0; }
};

// This machine's name (error messages name the rank and host that failed).
std::string host_name();

// Thrown on the ranks other than 0 when the ranks agreed to stop on a failure rank 0 reports (a
// worker's input differs from rank 0's): they exit 2 without a message of their own.
struct RankStop : std::runtime_error {
    RankStop() : std::runtime_error("stopped: rank 0 reports why") {}
};

// Whether this build can run as MPI ranks (-DDIFFRACT_MPI=ON; the Python wheel cannot).
bool built_with_mpi();

// Refuses (InputError with the recipe to use) a process that a launcher started as one of several
// copies — mpirun/mpiexec (OMPI_COMM_WORLD_SIZE, PMI_SIZE), srun (SLURM_STEP_NUM_TASKS) — but that
// is not one of several MPI ranks: a build without MPI, or srun without --mpi=pmix. Each copy would
// do the whole work. Every job calls it (Job), and the CLI before any command.
void check_launch();

// How long a rank waits for word from a rank it waits on before naming it and ending the job
// (DIFFRACT_RANK_TIMEOUT, seconds; default 60). Throws InputError for a value that is not a positive
// number (check_launch reports it before any command runs).
double rank_timeout_seconds();

// Initialises MPI when the process was started by an MPI launcher (and the build has MPI). With more than
// one rank, a liveness thread then sends this rank's heartbeat (rank 0 to every rank, the others to rank
// 0) every 2 s (a quarter of the timeout, when shorter), or, once this rank's busy threads have used no CPU
// for the timeout (core/busy_threads.hpp), says so instead.
void distributed_init(int* argc, char*** argv);
void distributed_finalize();
// Ends every rank with `code` (after a failure on one rank).
[[noreturn]] void distributed_abort(int code);
const Distributed& distributed();

// Which tasks each rank runs: greedy longest-processing-time assignment of the tasks with `needed[i]`
// set, identical on every rank. Returns every rank's task indices, result[r] for rank r.
std::vector<std::vector<std::size_t>> assign_tasks(const std::vector<TaskCost>& costs,
                                                   const std::vector<char>& needed);

// Messages from the other ranks to rank 0 while a job runs (results as each task finishes),
// of any size (sent in chunks). send_bytes: from this rank to `dest`; poll_message: a message waiting
// at this rank from any rank, received, or nothing. Called from the main thread only.
struct Message {
    int source = 0, tag = 0;
    std::string bytes;
};
void send_bytes(int dest, int tag, const std::string& bytes);
void send_bytes(int dest, int tag, std::span<const std::byte> bytes);
std::optional<Message> poll_message();
// The next message from `source` under `tag`, waiting for it (checking liveness meanwhile).
std::string receive_bytes(int source, int tag);

// Throws InputError naming the rank and host when a rank this one waits on — rank 0 waits on every rank
// not `finished[r]`, the others on rank 0 — has been silent for rank_timeout_seconds() or reported blocked
// threads, or when this rank's own threads are blocked. Every wait of the functions below checks it; a
// caller that polls (poll_message) calls it between polls.
void check_ranks_alive(std::span<const char> finished = {});
// Whether this rank reported its own busy threads blocked (then they are not waited for).
bool this_rank_blocked();

// Rank 0's `bytes` on every rank.
void broadcast_bytes(std::string& bytes);
// Every rank's `mine`, at rank 0 (in rank order); empty on the other ranks.
std::vector<std::string> gather_bytes(const std::string& mine);

}  // namespace diffract::run
