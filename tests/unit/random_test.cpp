// The library's random streams (include/diffract/core/random.hpp) pinned to values computed by an independent
// Python transcription of the published splitmix64 and xoshiro256** algorithms: seeded outputs (random head
// orders, permute, the alpha bootstrap, report jitter) depend on these exact sequences.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "diffract/core/random.hpp"

namespace diffract {
namespace {

TEST(Random, SplitMix64MatchesTheReferenceSequence) {
    std::uint64_t state = 0;
    EXPECT_EQ(splitmix64(state), 0xE220A8397B1DCDAFULL);  // Vigna's splitmix64.c, seed 0
}

TEST(Random, Xoshiro256StarStarSeededBySplitMix64) {
    Xoshiro256Rng rng(7);
    EXPECT_EQ(rng.next(), 0xB358FAF74EF9765AULL);
    EXPECT_EQ(rng.next(), 0x475C3D964F482CD2ULL);
    EXPECT_EQ(rng.next(), 0xD6F1D349952C7996ULL);
}

TEST(Random, ShuffleIsFisherYatesFromTheBackBySplitMix64Modulo) {
    std::array<int, 8> v{0, 1, 2, 3, 4, 5, 6, 7};
    std::uint64_t state = 42;
    shuffle(std::span<int>(v), state);
    EXPECT_EQ(v, (std::array<int, 8>{3, 1, 6, 2, 4, 0, 7, 5}));
}

// The look-ahead of shuffle draws the same targets in the same order as the plain loop: every length
// around the ring's size, and a long one, gives the plain Fisher-Yates permutation.
TEST(Random, ShuffleWithLookAheadIsThePlainFisherYates) {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{2}, kShuffleLookahead - 1, kShuffleLookahead,
          kShuffleLookahead + 1, 2 * kShuffleLookahead + 3, std::size_t{100000}}) {
        std::vector<std::uint32_t> fast(n), plain(n);
        for (std::size_t i = 0; i < n; ++i) fast[i] = plain[i] = static_cast<std::uint32_t>(i);
        std::uint64_t fast_state = 1000 + n, plain_state = 1000 + n;
        shuffle(std::span<std::uint32_t>(fast), fast_state);
        for (std::size_t i = n; i > 1; --i) std::swap(plain[i - 1], plain[splitmix64(plain_state) % i]);
        EXPECT_EQ(fast, plain) << "n = " << n;
        EXPECT_EQ(fast_state, plain_state) << "n = " << n;  // the same number of draws
    }
}

TEST(Random, UnitIntervalUsesTheTop53Bits) {
    EXPECT_EQ(unit_interval(0), 0.0);
    EXPECT_EQ(unit_interval(~0ULL), 1.0 - 0x1.0p-53);
    EXPECT_EQ(unit_interval(1ULL << 63), 0.5);
}

}  // namespace
}  // namespace diffract
