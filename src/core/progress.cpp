#include "diffract/core/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace diffract {

Progress::Progress(std::string label, std::size_t total, bool enabled, ProgressSink sink)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled && (sink || isatty(STDERR_FILENO))),
      sink_(std::move(sink)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
    if (enabled_ && sink_) sink_(0, total_, label_);
}

Progress::~Progress() { finish(); }

void Progress::advance(std::size_t n) {
    done_ += n;
    if (!enabled_) return;
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(200)) return;
    last_draw_ = now;
    draw(false);
}

void Progress::finish() {
    if (!enabled_ || finished_) return;
    std::lock_guard lock(mu_);
    finished_ = true;
    draw(true);
}

void Progress::draw(bool final) {
    if (sink_) {
        sink_(done_, total_, label_);
        return;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const std::size_t done = done_;
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
    const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
    std::fprintf(stderr, "\r%s: %zu/%zu matrices, %.1f/s, %s %.0fs   %s", label_.c_str(), done, total_, rate,
                 final ? "took" : "ETA", final ? elapsed : eta, final ? "\n" : "");
    std::fflush(stderr);
}

}  // namespace diffract
