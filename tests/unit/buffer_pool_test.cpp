// The recycling of large work buffers (include/diffract/core/buffer_pool.hpp): what is kept, for how
// long, within which capacity, and that a run's scheduler leaves nothing behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "diffract/core/buffer_pool.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/run/scheduler.hpp"

namespace diffract {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(BufferPool, KeepsNothingOutsideAScope) {
    ASSERT_EQ(buffer_pool_cached_bytes(), 0u);
    { PooledVector<double> v(4 * kMiB / sizeof(double)); }
    EXPECT_EQ(buffer_pool_cached_bytes(), 0u);
}

TEST(BufferPool, HandsAFreedBlockToTheNextRequestOfItsSize) {
    const BufferPoolScope scope(64 * kMiB);
    const void* first = nullptr;
    {
        PooledVector<double> v(2 * kMiB / sizeof(double), 1.0);
        first = v.data();
    }
    EXPECT_EQ(buffer_pool_cached_bytes(), 2 * kMiB);
    {
        PooledVector<double> other_size(3 * kMiB / sizeof(double));
        EXPECT_NE(other_size.data(), first);
        EXPECT_EQ(buffer_pool_cached_bytes(), 2 * kMiB);  // still cached: a different size
    }
    Matrix<double> m(512, 512);  // 2 MiB, the same size as v: its block, value-initialised
    EXPECT_EQ(m.data.data(), first);
    for (double x : m.data) ASSERT_EQ(x, 0.0);
    EXPECT_EQ(buffer_pool_cached_bytes(), 3 * kMiB);  // the 3 MiB block is left
}

TEST(BufferPool, SmallBlocksAreNotPooled) {
    const BufferPoolScope scope(64 * kMiB);
    { PooledVector<float> v(1000); }
    EXPECT_EQ(buffer_pool_cached_bytes(), 0u);
}

TEST(BufferPool, StaysWithinItsCapacityFreeingTheOldestFirst) {
    const BufferPoolScope scope(5 * kMiB);
    const void* second = nullptr;
    {
        PooledVector<char> a(2 * kMiB), b(2 * kMiB + 64), c(2 * kMiB + 128);
        second = b.data();
    }  // c, b, a are freed in that order: a, the last returned, would overflow; c the oldest goes
    EXPECT_LE(buffer_pool_cached_bytes(), 5 * kMiB);
    EXPECT_EQ(buffer_pool_cached_bytes(), 4 * kMiB + 64);
    PooledVector<char> again(2 * kMiB + 64);
    EXPECT_EQ(again.data(), second);
    { PooledVector<char> too_large(6 * kMiB); }
    EXPECT_EQ(buffer_pool_cached_bytes(), 2 * kMiB);  // never kept: more than the capacity
}

TEST(BufferPool, TheSmallestOpenScopeSetsTheCapacityAndTheLastEmptiesThePool) {
    {
        const BufferPoolScope outer(16 * kMiB);
        {
            const BufferPoolScope inner(1 * kMiB);
            { PooledVector<char> v(2 * kMiB); }
            EXPECT_EQ(buffer_pool_cached_bytes(), 0u);  // above the inner capacity
        }
        { PooledVector<char> v(2 * kMiB); }
        EXPECT_EQ(buffer_pool_cached_bytes(), 2 * kMiB);  // the outer capacity again
    }
    EXPECT_EQ(buffer_pool_cached_bytes(), 0u);
}

// Two runs whose scopes overlap without nesting (two Python threads): the first to end leaves the
// other's capacity, the last leaves an empty pool that keeps nothing.
TEST(BufferPool, OverlappingScopesEndWithNothingKept) {
    auto first = std::make_unique<BufferPoolScope>(8 * kMiB);
    auto second = std::make_unique<BufferPoolScope>(4 * kMiB);
    { PooledVector<char> v(3 * kMiB); }
    EXPECT_EQ(buffer_pool_cached_bytes(), 3 * kMiB);
    first.reset();
    EXPECT_EQ(buffer_pool_cached_bytes(), 3 * kMiB);  // the second's capacity still holds it
    second.reset();
    EXPECT_EQ(buffer_pool_cached_bytes(), 0u);
    { PooledVector<char> v(3 * kMiB); }
    EXPECT_EQ(buffer_pool_cached_bytes(), 0u);
}

// run_tasks recycles within the run, takes the pool's capacity out of the task budget and leaves an
// empty pool: tasks of 61 MiB under a 128 MiB budget (8 MiB of it the pool's) run one at a time.
TEST(BufferPool, RunTasksRecyclesWithinTheRunAndLeavesNothing) {
    std::atomic<int> running{0}, most{0};
    std::atomic<std::size_t> seen_cached{0};
    const std::vector<run::TaskCost> costs(4, run::TaskCost{1, 61 * kMiB});
    run::run_tasks(costs, 2, 128 * kMiB, [&](std::size_t) {
        const int now = ++running;
        for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
        }
        seen_cached = std::max(seen_cached.load(), buffer_pool_cached_bytes());
        { PooledVector<char> v(4 * kMiB); }
        --running;
    });
    EXPECT_EQ(most.load(), 1);
    EXPECT_GT(seen_cached.load(), 0u);  // a later task saw an earlier task's block cached
    EXPECT_EQ(buffer_pool_cached_bytes(), 0u);
}

}  // namespace
}  // namespace diffract
