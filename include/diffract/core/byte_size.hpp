// Sizes as users type them (--max-memory, --max-shard-size).
#pragma once

#include <cstdint>
#include <string>

namespace diffract {

// "8G", "512M", "1.5GiB", "1000000": bytes. Throws InputError naming `flag`.
std::uint64_t parse_size(const std::string& text, const std::string& flag);

}  // namespace diffract
