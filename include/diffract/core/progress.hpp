// A one-line progress display on stderr (items done, throughput, ETA), redrawn at most 5 times a
// second; silent when stderr is not a terminal or when disabled (--quiet). A front end with a display
// of its own (the Python bindings' tqdm bars) gives a sink instead.
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
    void advance(std::size_t n = 1);
    void finish();

private:
    void draw(bool final);
    std::string label_;
    std::size_t total_;
    bool enabled_;
    ProgressSink sink_;
    std::atomic<std::size_t> done_{0};
    std::mutex mu_;
    std::chrono::steady_clock::time_point start_, last_draw_;
    bool finished_ = false;
};

}  // namespace diffract
