// run::Job under MPI: each rank's inputs shipped from rank 0 when asked (--ship-inputs), and every other
// rank's results sent to rank 0 as each task finishes, where they are stored.
#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/run/distributed.hpp"
#include "diffract/run/job.hpp"
#include "diffract/run/shipped_inputs.hpp"
#include "diffract/run/stored_results.hpp"
#include "field_values_io_impl.hpp"
#include "job_impl.hpp"

namespace diffract::run {

void Job::ship_inputs(const std::vector<Task>& tasks, const std::vector<std::vector<std::size_t>>& shares) {
    const auto start = std::chrono::steady_clock::now();
    const auto sent = ship_task_inputs(tasks, shares);
    if (!is_root() || distributed().size == 1 || !run_.progress) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // What shipping costs, against the computing that follows: the line a user weighs --ship-inputs by.
    fmt::print(stderr, "{}: sent {:.1f} MiB of inputs to {} ranks in {:.2f} s ({:.0f} MiB/s)\n", label_,
               static_cast<double>(sent) / (1 << 20), distributed().size - 1, seconds,
               static_cast<double>(sent) / (1 << 20) / std::max(seconds, 1e-9));
}

std::string Job::encode_task_results(std::size_t task,
                                     const std::vector<std::pair<std::size_t, FieldValues>>& computed) {
    std::string out(sizeof(std::uint64_t), '\0');
    const std::uint64_t index = task;
    std::memcpy(out.data(), &index, sizeof index);
    for (const auto& [slot, v] : computed) out += serialize_field_values(slot, v);
    return out;
}

void Job::receive_task_results(const std::string& bytes, const std::vector<Task>& tasks,
                               const std::vector<TaskCost>& costs, Progress& progress) {
    std::uint64_t task = 0;
    if (bytes.size() < sizeof task) throw std::runtime_error(label_ + ": a rank sent a malformed result");
    std::memcpy(&task, bytes.data(), sizeof task);
    if (task >= tasks.size()) throw std::runtime_error(label_ + ": a rank sent the result of no task");
    for (auto& [slot, v] : parse_field_values(bytes.substr(sizeof task))) {
        if (!pending(slot))
            throw std::runtime_error(
                fmt::format("{}: a rank sent result {} that nobody computed", label_, slot));
        store_result(slot, std::move(v));
    }
    progress.advance(tasks[task].progress_steps, costs[task].cost);
}

void Job::exchange(const std::vector<Task>& tasks, const std::vector<TaskCost>& costs,
                   const std::function<void()>& compute_share, std::size_t share_size, Outbox& outbox,
                   Progress& progress) {
    // The share is computed on a thread of its own: this (the main) thread is the one that talks MPI.
    std::exception_ptr error;
    std::atomic<bool> finished{false};
    std::thread share([&] {
        try {
            compute_share();
        } catch (...) {
            error = std::current_exception();
        }
        finished = true;
    });
    const auto stop_share = [&] {
        if (!finished) request_cancel();  // the tasks in flight finish; no new one starts
        // A share blocked on its inputs never finishes: the job ends without it (the process exits and the
        // other ranks are aborted right after this error is reported).
        if (!finished && this_rank_blocked()) return share.detach();
        share.join();
    };
    try {
        if (is_root()) {
            const auto n = static_cast<std::size_t>(distributed().size);
            std::vector<char> done(n, 0);
            done[0] = 1;
            for (;;) {
                bool heard = false;
                while (auto m = poll_message()) {
                    heard = true;
                    if (m->tag == kTagResults) receive_task_results(m->bytes, tasks, costs, progress);
                    if (m->tag == kTagDone) done[static_cast<std::size_t>(m->source)] = 1;
                }
                if (finished && (error || std::all_of(done.begin(), done.end(), [](char d) { return d; })))
                    break;
                check_ranks_alive(done);  // the ranks not done yet
                if (!heard) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        } else {
            std::size_t sent = 0;
            for (;;) {
                const bool was_finished = finished;
                for (auto& payload : outbox.take()) {
                    send_bytes(0, kTagResults, payload);
                    detail::fault_after_sent(++sent, share_size);
                }
                if (was_finished) break;
                check_ranks_alive();  // rank 0, and this rank's own computing threads
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
            if (!error) send_bytes(0, kTagDone, std::string());
        }
    } catch (...) {
        stop_share();
        throw;
    }
    share.join();
    if (error) std::rethrow_exception(error);
}

}  // namespace diffract::run
