// Built without MPI: one rank.
#include <cstdlib>

#include "diffract/run/distributed.hpp"

namespace diffract::run {

bool built_with_mpi() { return false; }
void distributed_init(int*, char***) {}
void distributed_finalize() {}
void distributed_abort(int code) { std::exit(code); }
const Distributed& distributed() {
    static const Distributed single;
    return single;
}
void check_ranks_alive(std::span<const char>) {}
bool this_rank_blocked() { return false; }
void broadcast_bytes(std::string&) {}
void send_bytes(int, int, const std::string&) {}
void send_bytes(int, int, std::span<const std::byte>) {}
std::string receive_bytes(int, int) { return {}; }
std::optional<Message> poll_message() { return std::nullopt; }
std::vector<std::string> gather_bytes(const std::string& mine) { return {mine}; }

}  // namespace diffract::run
