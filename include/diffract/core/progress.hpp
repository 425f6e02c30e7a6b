// A one-line progress display on stderr (items done, throughput, ETA), redrawn at most 5 times a
// second; silent when stderr is not a terminal or when disabled (--quiet).
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

namespace diffract {

class Progress {
public:
    Progress(std::string label, std::size_t total, bool enabled);
    ~Progress();
    void advance(std::size_t n = 1);
    void finish();

private:
    void draw(bool final);
    std::string label_;
    std::size_t total_;
    bool enabled_;
    std::atomic<std::size_t> done_{0};
    std::mutex mu_;
    std::chrono::steady_clock::time_point start_, last_draw_;
    bool finished_ = false;
};

}  // namespace diffract
