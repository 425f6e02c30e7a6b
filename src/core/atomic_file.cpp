#include "diffract/core/atomic_file.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract {

void write_file_atomically(const std::string& path, const std::string& contents) {
    namespace fs = std::filesystem;
    const fs::path target(path);
    std::error_code ec;
    if (!target.parent_path().empty()) fs::create_directories(target.parent_path(), ec);
    const fs::path tmp = target.parent_path() /
                         fmt::format(".{}.tmp-{:08x}", target.filename().string(), std::random_device{}());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw_input_error(path, "", "cannot create file");
    const bool ok = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size() &&
                    std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    std::fclose(f);
    if (!ok) {
        fs::remove(tmp, ec);
        throw_input_error(path, "", "write failed (disk full?)");
    }
    fs::rename(tmp, target, ec);
    if (ec) {
        fs::remove(tmp, ec);
        throw_input_error(path, "", "cannot move the finished file into place");
    }
}

}  // namespace diffract
