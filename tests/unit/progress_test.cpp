// Progress with a sink (the Python bindings' progress=True): reported at the start, serialised, never
// decreasing, and at the end with the total, whichever threads advance it.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "diffract/core/progress.hpp"

namespace diffract {
namespace {

struct Report {
    std::size_t done, total;
    std::string label;
};

TEST(Progress, SinkSeesTheStartEveryThreadsWorkAndTheEnd) {
    std::vector<Report> reports;
    std::mutex mu;
    int inside = 0, overlapped = 0;
    auto sink = [&](std::size_t done, std::size_t total, std::string_view label) {
        {
            std::lock_guard lock(mu);
            if (++inside > 1) ++overlapped;
            reports.push_back({done, total, std::string(label)});
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        std::lock_guard lock(mu);
        --inside;
    };
    constexpr std::size_t kThreads = 4, kEach = 500;
    {
        Progress p("edit", kThreads * kEach, true, sink);
        std::vector<std::thread> workers;
        for (std::size_t t = 0; t < kThreads; ++t)
            workers.emplace_back([&] {
                for (std::size_t i = 0; i < kEach; ++i) {
                    p.advance();
                    std::this_thread::sleep_for(std::chrono::microseconds(200));
                }
            });
        for (auto& w : workers) w.join();
        p.finish();
    }
    ASSERT_GE(reports.size(), 2u);
    EXPECT_EQ(reports.front().done, 0u);
    EXPECT_EQ(reports.back().done, kThreads * kEach);
    EXPECT_EQ(overlapped, 0);
    for (std::size_t i = 0; i < reports.size(); ++i) {
        EXPECT_EQ(reports[i].total, kThreads * kEach);
        EXPECT_EQ(reports[i].label, "edit");
        if (i > 0) {
            EXPECT_GE(reports[i].done, reports[i - 1].done);
        }
    }
    // Rate-limited: about 5 a second over the run (~0.1 s), not one per item.
    EXPECT_LT(reports.size(), 50u);
}

TEST(Progress, DisabledSinkHearsNothing) {
    int calls = 0;
    {
        Progress p("analyze", 3, false, [&](std::size_t, std::size_t, std::string_view) { ++calls; });
        p.advance(3);
    }
    EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace diffract
