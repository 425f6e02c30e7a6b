#include "diffract/core/buffer_pool.hpp"

#include <cstdlib>
#include <iterator>
#include <mutex>
#include <set>

namespace diffract {
namespace {

struct CachedBlock {
    void* block;
    std::size_t bytes;
};

// One pool for the process: a block freed by one worker serves the next matrix of any worker. Large
// blocks are requested a few times per matrix, so one lock costs nothing measurable.
struct Pool {
    std::mutex mu;
    std::size_t capacity = 0, cached = 0;  // capacity: the smallest of the open scopes', else 0
    std::multiset<std::size_t> scopes;     // the capacities of the open scopes
    std::vector<CachedBlock> blocks;       // least recently returned first
};

// Never destroyed: a pooled vector in an object destroyed at exit, after this function's statics,
// still returns its block here.
Pool& pool() {
    static Pool* const p = new Pool;
    return *p;
}

constexpr std::size_t kAlignment = 64;

// Frees blocks, oldest first, until the cached bytes fit `capacity` (under the lock: a few unmaps).
void evict_to(Pool& p, std::size_t capacity) noexcept {
    std::size_t drop = 0;
    for (; drop < p.blocks.size() && p.cached > capacity; ++drop) {
        p.cached -= p.blocks[drop].bytes;
        std::free(p.blocks[drop].block);
    }
    p.blocks.erase(p.blocks.begin(), p.blocks.begin() + static_cast<std::ptrdiff_t>(drop));
}

}  // namespace

void* pooled_allocate(std::size_t bytes) {
    auto& p = pool();
    {
        std::lock_guard lock(p.mu);
        for (auto it = p.blocks.rbegin(); it != p.blocks.rend(); ++it) {
            if (it->bytes != bytes) continue;
            void* block = it->block;
            p.cached -= bytes;
            p.blocks.erase(std::next(it).base());
            return block;
        }
    }
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < bytes) throw std::bad_alloc();
    void* block = std::aligned_alloc(kAlignment, rounded);
    if (block == nullptr) throw std::bad_alloc();
    return block;
}

void pooled_release(void* block, std::size_t bytes) noexcept {
    auto& p = pool();
    {
        std::lock_guard lock(p.mu);
        if (bytes <= p.capacity) {
            try {
                p.blocks.push_back({block, bytes});
                p.cached += bytes;
                block = nullptr;
            } catch (...) {  // no room to remember it: it is freed below
            }
            evict_to(p, p.capacity);
        }
    }
    std::free(block);
}

std::size_t buffer_pool_cached_bytes() {
    auto& p = pool();
    std::lock_guard lock(p.mu);
    return p.cached;
}

BufferPoolScope::BufferPoolScope(std::size_t capacity_bytes) : capacity_(capacity_bytes) {
    auto& p = pool();
    std::lock_guard lock(p.mu);
    p.scopes.insert(capacity_);
    p.capacity = *p.scopes.begin();
    evict_to(p, p.capacity);
}

BufferPoolScope::~BufferPoolScope() {
    auto& p = pool();
    std::lock_guard lock(p.mu);
    p.scopes.erase(p.scopes.find(capacity_));
    p.capacity = p.scopes.empty() ? 0 : *p.scopes.begin();
    evict_to(p, p.scopes.empty() ? 0 : p.capacity);
}

}  // namespace diffract
