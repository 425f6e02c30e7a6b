// Limits on grids and sweeps: how many candidates, and whether the disk can hold them.
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/edit/edit.hpp"

namespace fs = std::filesystem;

namespace diffract::edit {

std::int64_t check_max_candidates(std::int64_t max_count) {
    if (max_count < 1)
        throw InputError(fmt::format("--max-candidates: expected at least 1, found {}", max_count));
    return max_count;
}

void throw_too_many_candidates(std::string_view what, double count, std::int64_t max_count) {
    const std::string n = std::isfinite(count) && count < 1e18
                              ? fmt::format("{}", static_cast<std::int64_t>(count))
                              : std::string("more than 10^18");
    throw InputError(
        fmt::format("{}: {} candidates exceed the limit (expected at most {}, found {}); raise "
                    "it with --max-candidates",
                    what, n, max_count, n));
}

std::uint64_t checkpoint_bytes(const formats::Checkpoint& ck) {
    std::uint64_t total = 0;
    for (const auto& t : ck.tensors) total += t.nbytes;
    return total;
}

void check_free_space(const std::string& out_path, std::uint64_t bytes, std::string_view what) {
    // The output does not exist yet: its nearest existing ancestor holds the file system.
    fs::path dir = physical_path(out_path);
    std::error_code ec;
    while (!fs::exists(dir, ec) && dir.has_relative_path()) dir = dir.parent_path();
    const auto space = fs::space(dir, ec);
    if (ec) return;  // unknown: the writer reports a full disk when it happens
    if (space.available < bytes)
        throw_input_error(dir.string(), "",
                          fmt::format("not enough free space for {} (expected at least {} bytes available, "
                                      "found {})",
                                      what, bytes, space.available));
}

}  // namespace diffract::edit
