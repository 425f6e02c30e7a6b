// MPI implementation. MPI is initialised only when a launcher started the process (mpirun sets
// OMPI_COMM_WORLD_SIZE / PMI_SIZE), so a plain `diffract` run never pays for MPI start-up.
#include <mpi.h>

#include <algorithm>
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

bool built_with_mpi() { return true; }

void distributed_init(int* argc, char*** argv) {
    const bool launched =
        std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
    if (!launched) return;
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    initialised = true;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &state.rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &state.size), "MPI_Comm_size");
    // The ranks sharing this machine's memory: the default memory budget is divided among them.
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, state.rank, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    check(MPI_Comm_size(node, &state.local_size), "MPI_Comm_size");
    MPI_Comm_free(&node);
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

// MPI counts are ints: anything larger travels in chunks of kChunk bytes.
constexpr std::size_t kChunk = std::size_t{1} << 30;

int chunk_length(std::size_t total, std::size_t at) { return static_cast<int>(std::min(kChunk, total - at)); }

void broadcast_bytes(std::string& bytes) {
    if (state.size == 1) return;
    unsigned long long n = bytes.size();
    check(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
    bytes.resize(n);
    for (std::size_t at = 0; at < n; at += kChunk)
        check(MPI_Bcast(bytes.data() + at, chunk_length(n, at), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
}

void send_bytes(int dest, int tag, const std::string& bytes) {
    unsigned long long n = bytes.size();
    check(MPI_Send(&n, 1, MPI_UNSIGNED_LONG_LONG, dest, tag, MPI_COMM_WORLD), "MPI_Send");
    for (std::size_t at = 0; at < n; at += kChunk)
        check(MPI_Send(bytes.data() + at, chunk_length(n, at), MPI_BYTE, dest, tag, MPI_COMM_WORLD),
              "MPI_Send");
}

std::optional<Message> poll_message() {
    int flag = 0;
    MPI_Status status;
    check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status), "MPI_Iprobe");
    if (!flag) return std::nullopt;
    // A message is its size, then its chunks, from one rank under one tag (delivered in order).
    Message m{status.MPI_SOURCE, status.MPI_TAG, {}};
    unsigned long long n = 0;
    check(MPI_Recv(&n, 1, MPI_UNSIGNED_LONG_LONG, m.source, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "MPI_Recv");
    m.bytes.resize(n);
    for (std::size_t at = 0; at < n; at += kChunk)
        check(MPI_Recv(m.bytes.data() + at, chunk_length(n, at), MPI_BYTE, m.source, m.tag, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
              "MPI_Recv");
    return m;
}

std::vector<std::string> gather_bytes(const std::string& mine) {
    if (state.size == 1) return {mine};
    unsigned long long n = mine.size();
    std::vector<unsigned long long> sizes(static_cast<std::size_t>(state.size));
    check(
        MPI_Gather(&n, 1, MPI_UNSIGNED_LONG_LONG, sizes.data(), 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD),
        "MPI_Gather");
    std::vector<std::string> out;
    if (state.rank != 0) {
        for (std::size_t at = 0; at < n; at += kChunk)
            check(MPI_Send(mine.data() + at, chunk_length(n, at), MPI_BYTE, 0, 0, MPI_COMM_WORLD),
                  "MPI_Send");
        return out;
    }
    out.resize(sizes.size());
    out[0] = mine;
    for (std::size_t r = 1; r < sizes.size(); ++r) {
        out[r].resize(sizes[r]);
        for (std::size_t at = 0; at < sizes[r]; at += kChunk)
            check(MPI_Recv(out[r].data() + at, chunk_length(sizes[r], at), MPI_BYTE, static_cast<int>(r), 0,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv");
    }
    return out;
}

}  // namespace diffract::run
