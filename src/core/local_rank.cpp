#include <charconv>
#include <cstdlib>
#include <string_view>

#include "diffract/core/local_rank.hpp"

namespace diffract {

int local_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
        const char* text = std::getenv(name);
        if (!text) continue;
        const std::string_view v(text);
        int rank = -1;
        const auto [end, error] = std::from_chars(v.data(), v.data() + v.size(), rank);
        if (error == std::errc() && end == v.data() + v.size() && rank >= 0) return rank;
    }
    return 0;
}

}  // namespace diffract
