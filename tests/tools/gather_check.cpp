// Under mpirun: every rank other than 0 sends BYTES bytes (a pattern of its rank) through gather_bytes,
// the transfer rank 0 uses to collect the other ranks' results; rank 0 checks every byte and prints
// "gathered N bytes from R ranks". Used by tests/python/test_mpi_inputs.py with more than 2 GiB, past
// MPI's int counts.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "diffract/run/distributed.hpp"

int main(int argc, char** argv) {
    diffract::run::distributed_init(&argc, &argv);
    const auto& world = diffract::run::distributed();
    const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0;
    std::string mine;
    if (!world.is_root()) {
        mine.resize(bytes);
        for (std::size_t i = 0; i < bytes; ++i) mine[i] = static_cast<char>((i * 131 + world.rank) & 0xff);
    }
    const auto all = diffract::run::gather_bytes(mine);
    int rc = 0;
    if (world.is_root()) {
        std::size_t total = 0;
        for (std::size_t r = 1; r < all.size(); ++r) {
            if (all[r].size() != bytes) rc = 1;
            for (std::size_t i = 0; i < all[r].size() && rc == 0; ++i)
                if (all[r][i] != static_cast<char>((i * 131 + r) & 0xff)) rc = 1;
            total += all[r].size();
        }
        std::printf("gathered %zu bytes from %zu ranks%s\n", total, all.size() - 1, rc ? " (WRONG)" : "");
    }
    diffract::run::distributed_finalize();
    return rc;
}
