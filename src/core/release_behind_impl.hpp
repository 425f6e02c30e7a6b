// How far a sequential read of a mapped tensor runs before it drops the pages behind it (they stay in
// the page cache): far enough that the madvise calls cost nothing, near enough that a 100k-row
// embedding's 0.8 GB of mapped pages never sit resident beside what is computed from them.
#pragma once

#include <cstddef>

namespace diffract {

inline constexpr std::size_t kReleaseBehindBytes = std::size_t{64} << 20;

}  // namespace diffract
