#include "diffract/core/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/mapped_file.hpp"
#include "diffract/core/output_path.hpp"

namespace fs = std::filesystem;

namespace diffract {
namespace {

std::string temporary_prefix(const fs::path& target) {
    return fmt::format(".{}.tmp-", target.filename().string());
}

fs::path temporary_for(const fs::path& target) {
    return target.parent_path() / fmt::format("{}{}-{:08x}", temporary_prefix(target),
                                              static_cast<long>(getpid()), std::random_device{}());
}

// The PID in a temporary's name, or 0 for a name without one (written by an older diffract).
long temporary_owner(const std::string& name, const std::string& prefix) {
    const auto rest = name.substr(prefix.size());
    const auto dash = rest.find('-');
    if (dash == std::string::npos || dash == 0) return 0;
    try {
        return std::stol(rest.substr(0, dash));
    } catch (const std::exception&) {
        return 0;
    }
}

void make_parent(const fs::path& target, const std::string& label) {
    std::error_code ec;
    if (target.parent_path().empty()) return;
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw_input_error(label, "", "cannot create the parent directory: " + ec.message());
}

// Whether `dir` holds only files named in `allowed`.
std::string foreign_entry(const fs::path& dir, const std::vector<std::string>& allowed) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const auto name = e.path().filename().string();
        if (!e.is_regular_file(ec) || std::find(allowed.begin(), allowed.end(), name) == allowed.end())
            return name;
    }
    if (ec) return "(unreadable: " + ec.message() + ")";
    return "";
}

// Writes `bytes` to `path` opened with `flags` (O_TRUNC or O_APPEND), and flushes them to disk; every
// step checked. Opened non-blocking and refused unless a regular file: a FIFO or device found there
// never blocks the run nor swallows the bytes.
void write_through(const std::string& path, int flags, const char* open_failure, const std::string& bytes) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | flags, 0666);
    if (fd < 0) throw_input_error(path, "", open_failure + std::string(std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || ::fcntl(fd, F_SETFL, flags & O_APPEND) != 0) {
        ::close(fd);
        throw_input_error(path, "", "exists and is not a regular file; refusing to write to it");
    }
    std::FILE* f = ::fdopen(fd, (flags & O_APPEND) ? "ab" : "wb");
    if (!f) {
        ::close(fd);
        throw_input_error(path, "", open_failure + std::string(std::strerror(errno)));
    }
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0 &&
                    fsync(fileno(f)) == 0;
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed) throw_input_error(path, "", "write failed (disk full?)");
}

}  // namespace

void write_file_fully(const std::string& path, const std::string& contents) {
    write_through(path, O_TRUNC, "cannot create file: ", contents);
}

void append_to_file(const std::string& path, const std::string& text) {
    write_through(path, O_APPEND, "cannot open for appending: ", text);
}

void remove_stale_temporaries(const std::string& target_path) {
    const fs::path target = physical_path(target_path);
    const auto prefix = temporary_prefix(target);
    std::error_code ec;
    const fs::path parent = target.parent_path();
    if (!fs::is_directory(parent, ec)) return;
    for (const auto& e : fs::directory_iterator(parent, ec)) {
        const auto name = e.path().filename().string();
        if (!name.starts_with(prefix)) continue;
        const long pid = temporary_owner(name, prefix);
        if (pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;  // still running
        std::error_code rm;
        fs::remove_all(e.path(), rm);
    }
}

void write_file_atomically(const std::string& path, const std::string& contents) {
    const fs::path target = physical_path(path);
    check_output_kind(path, OutputKind::file, "output");
    make_parent(target, path);
    remove_stale_temporaries(target.string());
    const fs::path tmp = temporary_for(target);
    std::error_code ec;
    try {
        write_file_fully(tmp.string(), contents);
    } catch (...) {
        fs::remove(tmp, ec);
        throw_input_error(path, "", "write failed (disk full?)");
    }
    try {
        check_mapped_inputs_intact();  // written from bytes read as zeros: never put in place
        check_output_kind(path, OutputKind::file, "output");  // nor a device or FIFO created meanwhile
    } catch (...) {
        fs::remove(tmp, ec);
        throw;
    }
    fs::rename(tmp, target, ec);
    if (ec) {
        fs::remove(tmp, ec);
        throw_input_error(path, "", "cannot move the finished file into place: " + ec.message());
    }
}

void write_directory_atomically(const std::string& out_dir,
                                const std::function<void(const std::string&)>& fill, ExistingOutput existing,
                                const std::vector<std::string>& result_files) {
    const fs::path target = physical_path(out_dir);
    std::error_code ec;
    auto check_existing = [&] {
        const auto st = fs::symlink_status(target, ec);
        if (!fs::exists(st)) return false;
        if (existing == ExistingOutput::refuse)
            throw_input_error(out_dir, "", "output already exists; refusing to overwrite it");
        if (!fs::is_directory(st)) throw_input_error(out_dir, "", "exists and is not a directory");
        if (const auto other = foreign_entry(target, result_files); !other.empty())
            throw_input_error(
                out_dir, "",
                fmt::format("exists and holds '{}', which diffract did not write; choose another "
                            "output directory",
                            other));
        return true;
    };
    check_existing();
    make_parent(target, out_dir);
    remove_stale_temporaries(target.string());
    const fs::path tmp = temporary_for(target);
    fs::create_directory(tmp, ec);
    if (ec) throw_input_error(tmp.string(), "", "cannot create temporary directory: " + ec.message());
    try {
        fill(tmp.string());
        check_mapped_inputs_intact();  // written from bytes read as zeros: never put in place
        // RENAME_NOREPLACE: a directory another run created meanwhile is never silently replaced.
        if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
            const int err = errno;
            if (err != EEXIST && err != ENOTEMPTY)
                throw_input_error(
                    out_dir, "",
                    fmt::format("cannot move the finished output into place: {}", std::strerror(err)));
            if (!check_existing())
                throw_input_error(out_dir, "", "another run is writing this output at the same time");
            // Both directories stay whole at every instant: the old one ends up at the temporary name.
            if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
                throw_input_error(out_dir, "",
                                  fmt::format("cannot replace the output: {}", std::strerror(errno)));
        }
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    fs::remove_all(tmp, ec);  // the replaced directory, if any
}

}  // namespace diffract
