// Progress of a long run on stderr (items done, elapsed, ETA). On a terminal: one line redrawn at most
// 5 times a second. Elsewhere (batch jobs, nohup, CI logs): a plain line every 10 seconds
// (DIFFRACT_PROGRESS_INTERVAL=SECONDS sets another interval), and a last
// one when the run took long enough to have printed any. Nothing when disabled (--quiet) or when there
// is nothing to do. A front end with a display of its own (the Python bindings' tqdm bars) gives a
// sink instead.
//
// The ETA comes from the work's cost when the caller weighs it (weigh(): the SVDs' flops, the bytes to
// hash), not from item counts: the first items of a run are often its largest (tasks run longest
// first), so counts alone overstate what is left (491 s predicted for a 20 s run).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace diffract {

// Receives (items done, total, label) in place of the stderr line: when the work starts, at most 5
// times a second from the engine's threads (one call at a time, `done` never decreasing), and when it
// finishes. It must not throw.
using ProgressSink = std::function<void(std::size_t done, std::size_t total, std::string_view label)>;

class Progress {
public:
    Progress(std::string label, std::size_t total, bool enabled, ProgressSink sink = {});
    ~Progress();
    // The total cost of the work (any unit); advance() then says how much of it an item did.
    void weigh(double total_cost);
    void advance(std::size_t n = 1, double cost = 0);
    void finish();

private:
    void draw(bool final);
    double remaining_seconds(double elapsed) const;
    std::string label_;
    std::size_t total_;
    bool enabled_;
    bool terminal_;
    std::chrono::milliseconds log_every_;  // lines when stderr is not a terminal
    ProgressSink sink_;
    std::atomic<std::size_t> done_{0};
    double total_cost_ = 0, done_cost_ = 0;  // guarded by mu_
    std::mutex mu_;
    std::chrono::steady_clock::time_point start_, last_draw_;
    bool finished_ = false, printed_ = false;
};

}  // namespace diffract
