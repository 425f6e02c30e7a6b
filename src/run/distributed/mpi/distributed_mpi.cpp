// MPI implementation. MPI is initialised only when a launcher started the process (mpirun sets
// OMPI_COMM_WORLD_SIZE / PMI_SIZE), so a plain `diffract` run never pays for MPI start-up.
#include <mpi.h>

#include <cstdlib>
#include <stdexcept>

#include "diffract/run/distributed.hpp"

namespace diffract::run {
namespace {

Distributed state;
bool initialised = false;

void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + call + " failed");
}

}  // namespace

void distributed_init(int* argc, char*** argv) {
    const bool launched =
        std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
    if (!launched) return;
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    initialised = true;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &state.rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &state.size), "MPI_Comm_size");
}

void distributed_finalize() {
    if (initialised) MPI_Finalize();
    initialised = false;
}

const Distributed& distributed() { return state; }

void distributed_abort(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
}

void broadcast_bytes(std::string& bytes) {
    if (state.size == 1) return;
    unsigned long long n = bytes.size();
    check(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
    bytes.resize(n);
    check(MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
}

std::vector<std::string> gather_bytes(const std::string& mine) {
    if (state.size == 1) return {mine};
    const int n = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<std::size_t>(state.size));
    check(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
    std::vector<int> offsets(sizes.size(), 0);
    std::string all;
    if (state.rank == 0) {
        for (std::size_t r = 1; r < sizes.size(); ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
        all.resize(static_cast<std::size_t>(offsets.back() + sizes.back()));
    }
    check(MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, 0,
                      MPI_COMM_WORLD),
          "MPI_Gatherv");
    std::vector<std::string> out;
    if (state.rank == 0)
        for (std::size_t r = 0; r < sizes.size(); ++r)
            out.push_back(
                all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(sizes[r])));
    return out;
}

}  // namespace diffract::run
