// Runs a long library call with the GIL released, on its own thread, while the calling thread polls
// for signals: Ctrl-C requests cancellation (diffract::request_cancel), waits for the matrices in
// flight, and raises KeyboardInterrupt. Library exceptions are rethrown on the calling thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <nanobind/nanobind.h>

#include "diffract/core/cancel.hpp"

namespace diffract::python {

template <typename F>
auto run_interruptible(F&& f) -> decltype(f()) {
    namespace nb = nanobind;
    using R = decltype(f());
    std::optional<R> result;
    std::exception_ptr error;
    std::optional<nb::python_error> interrupt;
    {
        nb::gil_scoped_release release;
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        std::thread worker([&] {
            try {
                result.emplace(f());
            } catch (...) {
                error = std::current_exception();
            }
            std::lock_guard lock(mu);
            done = true;
            cv.notify_all();
        });
        while (true) {
            {
                std::unique_lock lock(mu);
                if (cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return done; })) break;
            }
            if (interrupt) continue;
            nb::gil_scoped_acquire acquire;
            if (PyErr_CheckSignals() != 0) {
                interrupt.emplace();  // fetches the pending KeyboardInterrupt
                request_cancel();
            }
        }
        worker.join();
        if (interrupt) clear_cancel();
    }
    if (interrupt) throw std::move(*interrupt);
    if (error) std::rethrow_exception(error);
    return std::move(*result);
}

}  // namespace diffract::python
