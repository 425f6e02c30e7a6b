// Cooperative cancellation of a long computation (Ctrl-C in the Python bindings): a process-wide
// flag that the scheduling loops check between matrices. A cancelled run stops starting new matrices,
// lets the ones in flight finish (each commits to the store atomically) and throws Cancelled.
#pragma once

#include <stdexcept>

namespace diffract {

class Cancelled : public std::runtime_error {
public:
    Cancelled() : std::runtime_error("interrupted") {}
};

void request_cancel();
void clear_cancel();
bool cancel_requested();
// Throws Cancelled when a cancellation is pending.
void throw_if_cancelled();

}  // namespace diffract
