// A shell command run as one unit (subprocess.hpp): fork, a supervising process, a poll loop over its
// stdout with the timeout and interrupts checked, and the reaping of its process group.
#include "diffract/core/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"

namespace diffract {
namespace {

// The evaluation log, written with every byte checked: a full disk (ENOSPC, EDQUOT) or an I/O error
// is bad input naming the log, never a log with lines missing.
class Log {
public:
    Log(const std::string& path, const std::string& flag) : path_(path), flag_(flag) {
        // Non-blocking while opened, so that a FIFO in the log's place is refused rather than waited on.
        fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
        if (fd_ < 0) fail(errno);
        struct stat st {};
        const bool regular = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
        if (!regular || ::fcntl(fd_, F_SETFL, O_APPEND) != 0) {
            ::close(std::exchange(fd_, -1));
            throw_input_error(path_, "", fmt::format("{}: the log exists and is not a regular file", flag_));
        }
    }
    ~Log() {
        if (fd_ >= 0) ::close(fd_);
    }
    Log(const Log&) = delete;
    Log& operator=(const Log&) = delete;
    int fd() const { return fd_; }
    void write(std::string_view text) {
        while (!text.empty()) {
            const ssize_t n = ::write(fd_, text.data(), text.size());
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail(n < 0 ? errno : ENOSPC);
            text.remove_prefix(static_cast<std::size_t>(n));
        }
    }
    void close() {
        const int fd = std::exchange(fd_, -1);
        if (::close(fd) != 0 && errno != EINTR) fail(errno);
    }

private:
    [[noreturn]] void fail(int err) {
        throw InputError(
            fmt::format("{}: cannot write the evaluation log {}: {}", flag_, path_, std::strerror(err)));
    }
    std::string path_, flag_;
    int fd_ = -1;
};

// The command's shell, leader of its own process group.
struct Child {
    pid_t pid = -1;
    int status = 0;
    bool exited = false;
    bool reap(bool wait) {
        if (!exited && ::waitpid(pid, &status, wait ? 0 : WNOHANG) == pid) exited = true;
        return exited;
    }
    // Ends every process of the group: SIGTERM, then SIGKILL after `grace`; the shell is reaped.
    void end_group(std::chrono::milliseconds grace) {
        ::kill(-pid, SIGTERM);
        const auto until = std::chrono::steady_clock::now() + grace;
        while (std::chrono::steady_clock::now() < until) {
            reap(false);
            if (::kill(-pid, 0) != 0) break;  // nobody left in the group (the reaped shell included)
            ::usleep(20000);
        }
        ::kill(-pid, SIGKILL);
        reap(true);
    }
};

// The process between diffract and an evaluation's shell: it dies with diffract, even when diffract is
// killed by SIGKILL (then nothing of diffract runs to stop the evaluation), and takes the evaluation's
// process group with it (sh does not always exec the command, so a signal to sh alone would leave the
// evaluator running). Otherwise it waits for the shell and ends as the shell ended. Runs between fork
// and exec of a threaded process: async-signal-safe calls only.
void kill_evaluation_group(int) {
    ::kill(0, SIGKILL);
    ::_exit(137);
}

[[noreturn]] void supervise_evaluation(pid_t diffract, const char* cmd) {
    struct sigaction on_death {};
    on_death.sa_handler = kill_evaluation_group;
    ::sigaction(SIGUSR2, &on_death, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGUSR2);
    if (::getppid() != diffract) kill_evaluation_group(0);  // diffract died before the request took effect
    const pid_t shell = ::fork();
    if (shell == 0) {
        ::signal(SIGUSR2, SIG_DFL);
        ::execl("/bin/sh", "sh", "-c", cmd, static_cast<char*>(nullptr));
        ::_exit(127);
    }
    if (shell < 0) ::_exit(127);
    int status = 0;
    while (::waitpid(shell, &status, 0) < 0)
        if (errno != EINTR) ::_exit(127);
    if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
    ::signal(WTERMSIG(status), SIG_DFL);
    ::kill(::getpid(), WTERMSIG(status));
    ::_exit(128 + WTERMSIG(status));
}

// The command's stdout, read until its shell has exited and the pipe is closed (or quiet for a moment
// after the shell exited: a background child holding it open), the log written whole lines at a time.
// Ends the group and throws on an interrupt or a timeout.
class OutputPump {
public:
    OutputPump(const LoggedCommand& c, Log& log, Child& child, int fd)
        : c_(c), log_(log), child_(child), fd_(fd) {}

    std::string run() {
        const auto start = std::chrono::steady_clock::now();
        // Until the shell has exited and its stdout is closed, with the timeout and interrupts checked
        // every 100 ms.
        for (bool open = true;;) {
            int ready = 0;
            if (open) {
                pollfd p{fd_, POLLIN, 0};
                ready = ::poll(&p, 1, 100);
            } else {
                ::usleep(100000);
            }
            if (ready > 0) open = read_some();
            if (!exited_at_ && child_.reap(false)) exited_at_ = std::chrono::steady_clock::now();
            if (exited_at_ && !open) break;
            // A background child the command left holding stdout open: the command is over once its
            // shell has exited and the pipe has been quiet for a moment (the group is ended below).
            if (exited_at_ && open && ready == 0 &&
                std::chrono::steady_clock::now() - *exited_at_ > std::chrono::milliseconds(500))
                break;
            check_interrupt_and_timeout(start);
        }
        log_.write(unlogged_);
        return std::move(out_);
    }

private:
    // One read; false once the pipe is closed.
    bool read_some() {
        char buf[65536];
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n <= 0) return n < 0 && errno == EINTR;
        // The log keeps everything, whole lines at a time (so that the command's stderr, appended
        // directly, falls between lines); the caller needs only the end of the output.
        const std::string_view chunk(buf, static_cast<std::size_t>(n));
        if (const auto nl = chunk.rfind('\n'); nl != std::string_view::npos) {
            log_.write(unlogged_ + std::string(chunk.substr(0, nl + 1)));
            unlogged_.assign(chunk.substr(nl + 1));
        } else {
            unlogged_.append(chunk);
        }
        if (unlogged_.size() > kKeptCommandOutput) log_.write(std::exchange(unlogged_, std::string()));
        out_.append(buf, static_cast<std::size_t>(n));
        if (out_.size() > kKeptCommandOutput) out_.erase(0, out_.size() - kKeptCommandOutput / 2);
        return true;
    }

    void check_interrupt_and_timeout(std::chrono::steady_clock::time_point start) {
        if (cancel_requested()) {
            child_.end_group(std::chrono::milliseconds(2000));
            log_.write("\n== interrupted\n");
            throw Cancelled();
        }
        if (c_.timeout_seconds > 0 &&
            std::chrono::steady_clock::now() - start > std::chrono::duration<double>(c_.timeout_seconds)) {
            child_.end_group(std::chrono::milliseconds(2000));
            log_.write(fmt::format("\n== timed out after {} s\n", c_.timeout_seconds));
            throw InputError(
                fmt::format("{}: the command ran past {} ({} s) on {}; it and its children were ended "
                            "(its output: {})",
                            c_.flag, c_.timeout_flag, c_.timeout_seconds, c_.subject, c_.log_path));
        }
    }

    const LoggedCommand& c_;
    Log& log_;
    Child& child_;
    int fd_;
    std::optional<std::chrono::steady_clock::time_point> exited_at_;
    std::string out_, unlogged_;
};

// Forks the supervisor of the command's shell, its stdout to a pipe and its stderr to the log; returns
// the pipe's reading end.
int spawn(const LoggedCommand& c, Log& log, Child& child) {
    int out_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0)
        throw InputError(fmt::format("{}: cannot run '{}': {}", c.flag, c.display, std::strerror(errno)));
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int err = errno;
        ::close(out_pipe[0]), ::close(out_pipe[1]);
        throw InputError(fmt::format("{}: cannot run '{}': {}", c.flag, c.display, std::strerror(err)));
    }
    if (pid == 0) {
        // The child: a process group of its own, stdout to the pipe, stderr to the log, default signals.
        ::setpgid(0, 0);
        ::signal(SIGINT, SIG_DFL), ::signal(SIGTERM, SIG_DFL), ::signal(SIGPIPE, SIG_DFL);
        ::dup2(out_pipe[1], STDOUT_FILENO);
        ::dup2(log.fd(), STDERR_FILENO);
        supervise_evaluation(parent, c.shell.c_str());
    }
    ::setpgid(pid, pid);  // also here: no race with the child's own call
    ::close(out_pipe[1]);
    child.pid = pid;
    return out_pipe[0];
}

}  // namespace

std::string run_logged_command(const LoggedCommand& c) {
    Log log(c.log_path, c.flag);
    log.write(fmt::format("== {}: {}\n", c.flag, c.shell));
    Child child;
    struct Reader {
        int fd;
        ~Reader() { ::close(fd); }
    } reader{spawn(c, log, child)};
    std::string out;
    try {
        out = OutputPump(c, log, child, reader.fd).run();
    } catch (...) {
        if (!child.exited) child.end_group(std::chrono::milliseconds(2000));
        throw;
    }
    // Whatever the command left running in its group is ended with it (the shell has been reaped or
    // is waited for here).
    child.reap(true);
    ::kill(-child.pid, SIGKILL);
    const int status = child.status;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const std::string how = WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                                : fmt::format("exit status {}", code);
    log.write(fmt::format("{}== {}\n", out.empty() || out.back() == '\n' ? "" : "\n", how));
    log.close();
    if (code != 0)
        throw InputError(fmt::format("{}: command failed ({}) on {}: {} (its output: {})", c.flag, how,
                                     c.subject, c.display, c.log_path));
    return out;
}

}  // namespace diffract
