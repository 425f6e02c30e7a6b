// A shell command run as one unit: in a process group of its own (so that a timeout, an interrupt or a
// background child it left behind ends every process it started), supervised so that it dies with this
// process even under SIGKILL, its stdout and stderr appended to a log file as they arrive (not
// interleaved with the caller's progress), and the end of its stdout returned.
#pragma once

#include <string>

namespace diffract {

struct LoggedCommand {
    std::string shell;           // what /bin/sh -c runs
    std::string display;         // the command as the user wrote it, in messages
    std::string flag;            // the option that gave it: leads every message
    std::string log_path;        // appended to, after a line "== FLAG: SHELL"
    std::string subject;         // what the command runs on (a model's path), in messages
    double timeout_seconds = 0;  // a command running longer is ended with its group; 0: no limit
    std::string timeout_flag;    // the option that set the timeout, in its message
};

// The last bytes of the command's stdout (kKeptCommandOutput at most; the log has all of it). Throws
// InputError naming the flag, the subject and the log when the command cannot start, fails, runs past its
// timeout or the log cannot be written; Cancelled when a cancellation is requested while it runs (the
// group is ended first).
inline constexpr std::size_t kKeptCommandOutput = std::size_t{8} << 20;
std::string run_logged_command(const LoggedCommand& c);

}  // namespace diffract
