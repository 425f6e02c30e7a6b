// Large work buffers recycled between the matrices of a run instead of being returned to the kernel.
//
// A matrix read whole, its Gram matrix and its null's copy are tens to hundreds of MB each, allocated
// and freed once per matrix. glibc maps every such block afresh and unmaps it when freed, so each
// of its pages is faulted in and zeroed by the kernel again for the next matrix: on one thread, 8 %
// of the default catalog of an OLMo-2-1B layer was spent in page faults and unmapping
// (docs/performance.md). The pool keeps blocks that were freed, by exact size, up to a capacity,
// and hands them to the next request of that size, whose pages are already resident.
//
// The capacity is 0 (nothing kept) outside a BufferPoolScope; run_tasks opens one sized from the run's
// memory budget and takes that capacity out of the budget, so cached blocks are counted like any
// task's memory, and empties the pool when the run ends (a Python session keeps nothing).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace diffract {

// Blocks below this size come from the ordinary allocator: faulting them in costs little.
inline constexpr std::size_t kPooledMinBytes = std::size_t{1} << 20;

// A block of `bytes` (≥ kPooledMinBytes), 64-byte aligned: a cached one of exactly that size when
// there is one, else a new one. Throws std::bad_alloc.
void* pooled_allocate(std::size_t bytes);

// Returns a block from pooled_allocate: kept while the cached bytes stay within the capacity (the
// least recently returned blocks are freed first), else freed.
void pooled_release(void* block, std::size_t bytes) noexcept;

// Bytes held by the pool now (blocks returned and not handed out again).
std::size_t buffer_pool_cached_bytes();

// Opens the pool for its lifetime. The capacity is the smallest of the open scopes' (nested runs, or
// runs of several Python threads, each counted their own in their budget); blocks beyond it are freed
// at once. When the last scope closes the pool frees every block and keeps nothing.
class BufferPoolScope {
public:
    explicit BufferPoolScope(std::size_t capacity_bytes);
    ~BufferPoolScope();
    BufferPoolScope(const BufferPoolScope&) = delete;
    BufferPoolScope& operator=(const BufferPoolScope&) = delete;

private:
    std::size_t capacity_;
};

// std::allocator for small requests, the pool for large ones.
template <typename T>
struct PooledAllocator {
    using value_type = T;
    PooledAllocator() = default;
    template <typename U>
    PooledAllocator(const PooledAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) {
        if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
        const std::size_t bytes = n * sizeof(T);
        if (bytes < kPooledMinBytes) return std::allocator<T>{}.allocate(n);
        return static_cast<T*>(pooled_allocate(bytes));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        const std::size_t bytes = n * sizeof(T);
        if (bytes < kPooledMinBytes) return std::allocator<T>{}.deallocate(p, n);
        pooled_release(p, bytes);
    }
    template <typename U>
    bool operator==(const PooledAllocator<U>&) const noexcept {
        return true;
    }
};

template <typename T>
using PooledVector = std::vector<T, PooledAllocator<T>>;

}  // namespace diffract
