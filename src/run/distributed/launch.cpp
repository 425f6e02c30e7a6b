#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/run/distributed.hpp"

namespace diffract::run {
namespace {

struct Copies {
    long count = 1;
    const char* launcher = "";
};

long env_count(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return *end == '\0' && n > 0 ? n : 0;
}

// How many copies of this process a launcher started, by the variables each sets in its tasks.
Copies launched_copies() {
    if (const long n = env_count("OMPI_COMM_WORLD_SIZE")) return {n, "mpirun"};
    if (const long n = env_count("PMI_SIZE")) return {n, "an MPI launcher (PMI)"};
    if (const long n = env_count("SLURM_STEP_NUM_TASKS")) return {n, "srun"};
    return {};
}

}  // namespace

std::string host_name() {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) return "?";
    return name;
}

double rank_timeout_seconds() {
    if (const char* v = std::getenv("DIFFRACT_RANK_TIMEOUT")) {
        char* end = nullptr;
        const double t = std::strtod(v, &end);
        if (end != v && *end == '\0' && t > 0 && std::isfinite(t)) return t;
        throw InputError(fmt::format("DIFFRACT_RANK_TIMEOUT={}: expected a positive number of seconds", v));
    }
    return 60;
}

void check_launch() {
    if (distributed().size > 1) rank_timeout_seconds();
    const auto copies = launched_copies();
    if (copies.count <= 1 || distributed().size > 1) return;
    if (!built_with_mpi())
        throw InputError(fmt::format(
            "started by {} as one of {} copies, but this diffract is built without MPI (the Python wheel, or "
            "-DDIFFRACT_MPI=OFF): each copy would do the whole work. Run one copy — it uses every core of "
            "the machine — or a build with MPI under mpirun (docs/distributed.md)",
            copies.launcher, copies.count));
    throw InputError(fmt::format(
        "started by {} as one of {} copies that are not MPI ranks (srun needs --mpi=pmix to start MPI "
        "ranks): each copy would do the whole work. Use `srun --mpi=pmix -n {} diffract ...` or `mpirun`, "
        "or run one copy (docs/distributed.md)",
        copies.launcher, copies.count, copies.count));
}

}  // namespace diffract::run
