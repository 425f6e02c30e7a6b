#include "diffract/core/cancel.hpp"

#include <atomic>

namespace diffract {
namespace {
std::atomic<bool> g_cancel{false};
}  // namespace

void request_cancel() { g_cancel.store(true); }
void clear_cancel() { g_cancel.store(false); }
bool cancel_requested() { return g_cancel.load(); }
void throw_if_cancelled() {
    if (g_cancel.load()) throw Cancelled();
}

}  // namespace diffract
