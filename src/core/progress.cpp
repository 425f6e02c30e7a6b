#include "diffract/core/progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract {
namespace {

constexpr auto kTerminalEvery = std::chrono::milliseconds(200);
constexpr double kLogEverySeconds = 10;

// The interval of the lines written when stderr is not a terminal: DIFFRACT_PROGRESS_INTERVAL seconds
// (a batch system's log granularity: 0.001 to 1e6, lines are timed in milliseconds), else 10 s. Any
// other value (text, 0, a negative or denormal number, inf) is refused in one line, never replaced by
// the default or by a line on every update.
std::chrono::milliseconds log_interval() {
    double s = kLogEverySeconds;
    if (const char* v = std::getenv("DIFFRACT_PROGRESS_INTERVAL"); v && *v) {  // set and not empty
        char* end = nullptr;
        const double parsed = std::strtod(v, &end);
        if (end == v || *end != '\0' || !(parsed >= 0.001 && parsed <= 1e6))
            throw InputError(
                fmt::format("DIFFRACT_PROGRESS_INTERVAL: expected seconds between 0.001 and 1e6, found '{}'",
                            one_line(v)));
        s = parsed;
    }
    return std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000)));
}

std::string duration_text(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    const auto t = static_cast<long long>(std::llround(s));
    if (t < 60) return std::to_string(t) + "s";
    if (t < 3600)
        return std::to_string(t / 60) + "m" + (t % 60 < 10 ? "0" : "") + std::to_string(t % 60) + "s";
    return std::to_string(t / 3600) + "h" + (t % 3600 / 60 < 10 ? "0" : "") + std::to_string(t % 3600 / 60) +
           "m";
}

}  // namespace

Progress::Progress(std::string label, std::size_t total, bool enabled, ProgressSink sink)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled && (sink || total > 0)),  // a front end's own display shows an empty run too
      terminal_(isatty(STDERR_FILENO) != 0),
      log_every_(log_interval()),
      sink_(std::move(sink)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
    if (enabled_ && sink_) sink_(0, total_, label_);
}

Progress::~Progress() { finish(); }

void Progress::weigh(double total_cost) {
    std::lock_guard lock(mu_);
    total_cost_ = total_cost;
}

void Progress::advance(std::size_t n, double cost) {
    done_ += n;
    std::lock_guard lock(mu_);
    done_cost_ += cost;
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const std::chrono::milliseconds every = sink_ || terminal_ ? kTerminalEvery : log_every_;
    if (now - last_draw_ < every) return;
    last_draw_ = now;
    draw(false);
}

void Progress::finish() {
    if (!enabled_ || finished_) return;
    std::lock_guard lock(mu_);
    finished_ = true;
    draw(true);
}

double Progress::remaining_seconds(double elapsed) const {
    if (total_cost_ > 0 && done_cost_ > 0) return elapsed * (total_cost_ - done_cost_) / done_cost_;
    const std::size_t done = done_;
    return done > 0 ? elapsed * static_cast<double>(total_ - done) / static_cast<double>(done) : NAN;
}

void Progress::draw(bool final) {
    if (sink_) {
        sink_(done_, total_, label_);
        return;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const std::size_t done = done_;
    if (terminal_) {
        const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
        std::fprintf(stderr, "\r%s: %zu/%zu matrices, %.1f/s, %s %s   %s", label_.c_str(), done, total_, rate,
                     final ? "took" : "ETA",
                     duration_text(final ? elapsed : remaining_seconds(elapsed)).c_str(), final ? "\n" : "");
    } else if (!final) {
        printed_ = true;
        std::fprintf(stderr, "%s: %zu/%zu matrices, %s elapsed, ETA %s\n", label_.c_str(), done, total_,
                     duration_text(elapsed).c_str(), duration_text(remaining_seconds(elapsed)).c_str());
    } else if (printed_) {
        std::fprintf(stderr, "%s: %zu/%zu matrices in %s\n", label_.c_str(), done, total_,
                     duration_text(elapsed).c_str());
    }
    std::fflush(stderr);
}

}  // namespace diffract
