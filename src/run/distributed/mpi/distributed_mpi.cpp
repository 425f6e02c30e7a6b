// MPI implementation. MPI is initialised only when a launcher started the process (mpirun sets
// OMPI_COMM_WORLD_SIZE / PMI_SIZE), so a plain `diffract` run never pays for MPI start-up.
//
// Liveness: every rank runs a thread that sends a heartbeat on a communicator of its own (workers to
// rank 0, rank 0 to every worker) and receives the others'. Every wait of the main thread — each
// collective, each message, the exchange of results — polls and checks the heartbeats of the ranks it
// waits on, so a rank stopped at any point of a job (opening its inputs, hashing them, the look-up,
// computing) is named within the timeout instead of waited on for ever. A rank whose own busy threads
// have used no CPU past the timeout (core/busy_threads.hpp: blocked on a dead filesystem) sends that
// instead of its heartbeat. The thread needs MPI_THREAD_MULTIPLE; without it the waits block as before.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "diffract/core/busy_threads.hpp"
#include "diffract/core/error.hpp"
#include "diffract/run/distributed.hpp"

namespace diffract::run {
namespace {

using Clock = std::chrono::steady_clock;

Distributed state;
bool initialised = false;

void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + call + " failed");
}

class Liveness {
public:
    void start(std::vector<std::string> hosts) {
        hosts_ = std::move(hosts);
        try {
            timeout_ = rank_timeout_seconds();
        } catch (const InputError&) {
            // check_launch reports the bad value before any command runs
        }
        last_heard_.assign(hosts_.size(), Clock::now());
        reports_.assign(hosts_.size(), {});
        check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
        thread_ = std::thread([this] { loop(); });
    }

    void stop() {
        if (!thread_.joinable()) return;
        stop_ = true;
        thread_.join();
    }

    bool blocked() {
        std::lock_guard lock(mu_);
        return !own_report_.empty();
    }

    const std::string& host(int rank) const {
        static const std::string unknown = "?";
        return rank >= 0 && static_cast<std::size_t>(rank) < hosts_.size() ? hosts_[rank] : unknown;
    }

    // Throws InputError when this rank's busy threads are blocked, or a rank this one waits on (rank 0
    // waits on every rank not `finished`; the others on rank 0) reported so or has been silent past the
    // timeout.
    void check_waited_on(std::span<const char> finished) {
        if (!thread_.joinable()) return;
        std::lock_guard lock(mu_);
        const auto tail = [this] {
            return fmt::format(
                ": the job ends; every result that reached rank 0 is in the store, and a re-run computes "
                "only the rest (DIFFRACT_RANK_TIMEOUT sets the wait, now {:g} s)",
                timeout_);
        };
        // A worker's own lines are prefixed with its rank and host by the command line's error handler.
        if (!own_report_.empty())
            throw InputError((state.is_root() ? fmt::format("rank 0 on host {}: ", host(0)) : std::string()) +
                             own_report_ + tail());
        const auto now = Clock::now();
        for (int r = 0; r < state.size; ++r) {
            if (r == state.rank || (!state.is_root() && r != 0)) continue;
            if (static_cast<std::size_t>(r) < finished.size() && finished[r]) continue;
            if (!reports_[r].empty())
                throw InputError(fmt::format("rank {} on host {}: {}{}", r, host(r), reports_[r], tail()));
            if (const double silent = std::chrono::duration<double>(now - last_heard_[r]).count();
                silent > timeout_)
                throw InputError(
                    fmt::format("rank {} on host {} has sent nothing for {:g} s (stopped, or its host or "
                                "network gone){}",
                                r, host(r), timeout_, tail()));
        }
    }

private:
    enum : int { kBeat = 1, kBlocked = 2 };

    void loop() {
        const auto beat = std::chrono::duration<double>(std::min(2.0, timeout_ / 4));
        auto next_beat = Clock::now();
        while (!stop_) {
            receive();
            if (Clock::now() >= next_beat) {
                send_state();
                next_beat = Clock::now() + std::chrono::duration_cast<Clock::duration>(beat);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }

    void receive() {
        for (;;) {
            int flag = 0;
            MPI_Status status;
            if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &status) != MPI_SUCCESS || !flag)
                return;
            int n = 0;
            MPI_Get_count(&status, MPI_CHAR, &n);
            std::string text(static_cast<std::size_t>(std::max(n, 0)), '\0');
            MPI_Recv(text.data(), n, MPI_CHAR, status.MPI_SOURCE, status.MPI_TAG, comm_, MPI_STATUS_IGNORE);
            std::lock_guard lock(mu_);
            const auto r = static_cast<std::size_t>(status.MPI_SOURCE);
            if (r >= last_heard_.size()) continue;
            last_heard_[r] = Clock::now();
            if (status.MPI_TAG == kBlocked && reports_[r].empty()) reports_[r] = text;
        }
    }

    // A heartbeat, or (once, and then nothing) the report that this rank's threads are blocked. Sends never
    // wait: a stopped peer must not stop this thread's other work.
    void send_state() {
        static const char beat = 0;
        const double idle = longest_busy_idle_seconds();
        bool blocked = false;
        {
            std::lock_guard lock(mu_);
            if (idle > timeout_ && own_report_.empty()) {
                own_report_ = fmt::format(
                    "a computing thread has used no CPU for {:.0f} s (blocked reading its inputs: a dead "
                    "network filesystem?)",
                    idle);
                blocked = true;
            } else if (!own_report_.empty()) {
                return;  // no heartbeat from a blocked rank
            }
        }
        for (int r = 0; r < state.size; ++r) {
            if (r == state.rank || (!state.is_root() && r != 0)) continue;
            MPI_Request request;
            const int rc = blocked ? MPI_Isend(own_report_.data(), static_cast<int>(own_report_.size()),
                                               MPI_CHAR, r, kBlocked, comm_, &request)
                                   : MPI_Isend(&beat, 1, MPI_CHAR, r, kBeat, comm_, &request);
            if (rc == MPI_SUCCESS) MPI_Request_free(&request);
        }
    }

    std::vector<std::string> hosts_;
    double timeout_ = 60;
    MPI_Comm comm_ = MPI_COMM_NULL;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::vector<Clock::time_point> last_heard_;
    std::vector<std::string> reports_;  // per rank: its report of blocked threads
    std::string own_report_;            // never changed once set (its bytes are being sent)
};

Liveness liveness;

// Every rank's host name, in rank order (collective).
std::vector<std::string> all_host_names() {
    constexpr int kLength = 256;
    std::string mine = host_name();
    mine.resize(kLength - 1);
    std::vector<char> all(static_cast<std::size_t>(state.size) * kLength);
    check(MPI_Allgather(mine.c_str(), kLength, MPI_CHAR, all.data(), kLength, MPI_CHAR, MPI_COMM_WORLD),
          "MPI_Allgather");
    std::vector<std::string> out;
    for (int r = 0; r < state.size; ++r) out.emplace_back(all.data() + static_cast<std::size_t>(r) * kLength);
    return out;
}

// Waits for `request` on the main thread, checking the ranks it waits on meanwhile.
void wait(MPI_Request& request, std::span<const char> finished = {}) {
    for (int polls = 0;; ++polls) {
        int done = 0;
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) return;
        liveness.check_waited_on(finished);
        // Quick collectives answer within microseconds; a long wait costs a poll every 2 ms.
        std::this_thread::sleep_for(polls < 200 ? std::chrono::microseconds(20)
                                                : std::chrono::microseconds(2000));
    }
}

}  // namespace

bool built_with_mpi() { return true; }

void distributed_init(int* argc, char*** argv) {
    const bool launched =
        std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
    if (!launched) return;
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    initialised = true;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &state.rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &state.size), "MPI_Comm_size");
    // The ranks sharing this machine's memory: the default memory budget is divided among them.
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, state.rank, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    check(MPI_Comm_size(node, &state.local_size), "MPI_Comm_size");
    MPI_Comm_free(&node);
    if (state.size > 1 && provided >= MPI_THREAD_MULTIPLE) liveness.start(all_host_names());
}

void distributed_finalize() {
    liveness.stop();
    if (initialised) MPI_Finalize();
    initialised = false;
}

const Distributed& distributed() { return state; }

void distributed_abort(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
}

void check_ranks_alive(std::span<const char> finished) { liveness.check_waited_on(finished); }
bool this_rank_blocked() { return liveness.blocked(); }

// MPI counts are ints: anything larger travels in chunks of kChunk bytes.
constexpr std::size_t kChunk = std::size_t{1} << 30;

int chunk_length(std::size_t total, std::size_t at) { return static_cast<int>(std::min(kChunk, total - at)); }

// Moves `total` bytes a chunk at a time: `start(at, length, request)` begins the transfer of bytes
// [at, at + length), which is then waited for (checking liveness) before the next begins.
template <typename Start>
void in_chunks(std::size_t total, Start start) {
    for (std::size_t at = 0; at < total; at += kChunk) {
        MPI_Request request;
        start(at, chunk_length(total, at), &request);
        wait(request);
    }
}

void broadcast_bytes(std::string& bytes) {
    if (state.size == 1) return;
    unsigned long long n = bytes.size();
    MPI_Request request;
    check(MPI_Ibcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast");
    wait(request);
    bytes.resize(n);
    in_chunks(n, [&](std::size_t at, int length, MPI_Request* r) {
        check(MPI_Ibcast(bytes.data() + at, length, MPI_BYTE, 0, MPI_COMM_WORLD, r), "MPI_Ibcast");
    });
}

void send_bytes(int dest, int tag, const std::string& bytes) {
    send_bytes(dest, tag, std::as_bytes(std::span(bytes.data(), bytes.size())));
}

void send_bytes(int dest, int tag, std::span<const std::byte> bytes) {
    unsigned long long n = bytes.size();
    MPI_Request request;
    check(MPI_Isend(&n, 1, MPI_UNSIGNED_LONG_LONG, dest, tag, MPI_COMM_WORLD, &request), "MPI_Isend");
    wait(request);
    in_chunks(n, [&](std::size_t at, int length, MPI_Request* r) {
        check(MPI_Isend(const_cast<std::byte*>(bytes.data()) + at, length, MPI_BYTE, dest, tag,
                        MPI_COMM_WORLD, r),
              "MPI_Isend");
    });
}

std::optional<Message> poll_message() {
    int flag = 0;
    MPI_Status status;
    check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status), "MPI_Iprobe");
    if (!flag) return std::nullopt;
    return Message{status.MPI_SOURCE, status.MPI_TAG, receive_bytes(status.MPI_SOURCE, status.MPI_TAG)};
}

std::string receive_bytes(int source, int tag) {
    // A message is its size, then its chunks, from one rank under one tag (delivered in order).
    unsigned long long n = 0;
    MPI_Request request;
    check(MPI_Irecv(&n, 1, MPI_UNSIGNED_LONG_LONG, source, tag, MPI_COMM_WORLD, &request), "MPI_Irecv");
    wait(request);
    std::string bytes(n, '\0');
    in_chunks(n, [&](std::size_t at, int length, MPI_Request* r) {
        check(MPI_Irecv(bytes.data() + at, length, MPI_BYTE, source, tag, MPI_COMM_WORLD, r), "MPI_Irecv");
    });
    return bytes;
}

std::vector<std::string> gather_bytes(const std::string& mine) {
    if (state.size == 1) return {mine};
    unsigned long long n = mine.size();
    std::vector<unsigned long long> sizes(static_cast<std::size_t>(state.size));
    MPI_Request request;
    check(MPI_Igather(&n, 1, MPI_UNSIGNED_LONG_LONG, sizes.data(), 1, MPI_UNSIGNED_LONG_LONG, 0,
                      MPI_COMM_WORLD, &request),
          "MPI_Igather");
    wait(request);
    std::vector<std::string> out;
    if (state.rank != 0) {
        in_chunks(n, [&](std::size_t at, int length, MPI_Request* r) {
            check(MPI_Isend(mine.data() + at, length, MPI_BYTE, 0, 0, MPI_COMM_WORLD, r), "MPI_Isend");
        });
        return out;
    }
    out.resize(sizes.size());
    out[0] = mine;
    for (std::size_t r = 1; r < sizes.size(); ++r) {
        out[r].resize(sizes[r]);
        in_chunks(sizes[r], [&](std::size_t at, int length, MPI_Request* req) {
            check(
                MPI_Irecv(out[r].data() + at, length, MPI_BYTE, static_cast<int>(r), 0, MPI_COMM_WORLD, req),
                "MPI_Irecv");
        });
    }
    return out;
}

}  // namespace diffract::run
