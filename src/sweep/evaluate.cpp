// Running an evaluation: the shell command with the candidate's path, in a process group of its own
// (so that a timeout, an interrupt or a background child it left behind ends every process it started),
// its output kept in a log file (not interleaved with the sweep's progress), and the score read from its
// stdout by one documented rule (docs/evaluators.md, "The score").
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/sweep/sweep.hpp"

namespace diffract::sweep {
namespace {

constexpr std::size_t kKeptOutput = std::size_t{8} << 20;  // stdout kept for the score (the log has all)
constexpr std::size_t kMaxScoreLine = 4096;                // a longer last line of many numbers: "too long"

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

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

// A number spelled whole by `text` (surrounding blanks allowed): strtod's grammar, so "nan", "inf" and
// "1e999" are numbers here and refused as non-finite scores by name later.
std::optional<double> whole_number(std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) return std::nullopt;
    const auto last = text.find_last_not_of(" \t\r");
    const std::string token(text.substr(first, last - first + 1));
    char* end = nullptr;
    const double v = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size()) return std::nullopt;
    return v;
}

// The numbers written in `line`: strtod's decimal and exponent forms starting at a token boundary, and
// the words nan and inf(inity) in any case (a non-finite score is refused by name later, not skipped).
std::vector<double> numbers_in(std::string_view line) {
    std::vector<double> found;
    auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (std::size_t i = 0; i < line.size();) {
        const bool boundary = i == 0 || !(word_char(line[i - 1]) || line[i - 1] == '.');
        if (!boundary) {
            ++i;
            continue;
        }
        std::size_t j = i;
        if (line[j] == '+' || line[j] == '-') ++j;
        auto word_is = [&](std::string_view w) {
            if (line.size() - j < w.size()) return false;
            for (std::size_t k = 0; k < w.size(); ++k)
                if (std::tolower(static_cast<unsigned char>(line[j + k])) != w[k]) return false;
            return j + w.size() == line.size() || !word_char(line[j + w.size()]);
        };
        if (word_is("nan") || word_is("inf") || word_is("infinity")) {
            found.push_back(word_is("nan") ? NAN : (line[i] == '-' ? -INFINITY : INFINITY));
            i = j + (word_is("infinity") ? 8 : 3);
            continue;
        }
        const bool digits = j < line.size() && (std::isdigit(static_cast<unsigned char>(line[j])) ||
                                                (line[j] == '.' && j + 1 < line.size() &&
                                                 std::isdigit(static_cast<unsigned char>(line[j + 1]))));
        if (!digits) {
            ++i;
            continue;
        }
        // Only the characters a decimal number can hold are handed to strtod (no hex, no "infinity").
        std::size_t k = j;
        while (k < line.size() &&
               (std::isdigit(static_cast<unsigned char>(line[k])) || line[k] == '.' || line[k] == 'e' ||
                line[k] == 'E' ||
                ((line[k] == '+' || line[k] == '-') && (line[k - 1] == 'e' || line[k - 1] == 'E'))))
            ++k;
        const std::string token(line.substr(i, k - i));
        char* end = nullptr;
        found.push_back(std::strtod(token.c_str(), &end));
        i += std::max<std::size_t>(1, static_cast<std::size_t>(end - token.c_str()));
    }
    return found;
}

// A line of the command's output as a JSON object; nullopt for any other line. A line nested deeper than
// kMaxJsonDepth is refused (quoting or copying it would recurse once per level).
template <class Json>
std::optional<Json> json_object_line(std::string_view line, const std::string& flag) {
    const auto start = line.find_first_not_of(" \t\r\n");
    if (start == std::string_view::npos || line[start] != '{') return std::nullopt;
    auto j = parse_json_bounded<Json>(line, fmt::format("{}: the command's output", flag));
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    return j;
}

}  // namespace

double parse_score(const std::string& text, const std::string& key, const std::string& flag) {
    if (!key.empty()) {
        std::vector<std::string> lines;
        std::istringstream in(text);
        for (std::string l; std::getline(in, l);) lines.push_back(l);
        lines.push_back(text);  // a JSON document spread over several lines
        for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
            const auto line = json_object_line<nlohmann::json>(*it, flag);
            if (!line) continue;
            const nlohmann::json* v = &*line;
            std::istringstream path(key);
            for (std::string part; v && std::getline(path, part, '.');)
                v = v->is_object() && v->contains(part) ? &(*v)[part] : nullptr;
            if (v && v->is_number()) return v->get<double>();
        }
        throw InputError(fmt::format("{}: no JSON line on stdout has a numeric field '{}'", flag, key));
    }
    // Otherwise the last line "diffract-score: X"; or else the last non-blank line: a JSON object's last
    // member, or the line's number when it holds exactly one. Anything else is ambiguous ("loss nan after 3
    // steps" holds two) and refused rather than guessed.
    std::optional<double> marked;
    std::string_view last_line;
    for (std::size_t pos = 0; pos < text.size();) {
        const auto end = std::min(text.find('\n', pos), text.size());
        const std::string_view line(text.data() + pos, end - pos);
        pos = end + 1;
        constexpr std::string_view kMarker = "diffract-score:";
        if (line.starts_with(kMarker)) {
            marked = whole_number(line.substr(kMarker.size()));
            if (!marked)
                throw InputError(fmt::format("{}: the line '{}' does not give one number", flag,
                                             one_line(line.substr(0, 200))));
        }
        if (line.find_first_not_of(" \t\r") != std::string_view::npos) last_line = line;
    }
    if (marked) return *marked;
    // A last line that is a JSON object (the shipped evaluators' form): its last member, a number.
    if (const auto j = json_object_line<nlohmann::ordered_json>(last_line, flag)) {
        if (!j->empty() && j->back().is_number()) return j->back().get<double>();
        throw InputError(
            fmt::format("{}: the last member of the JSON line '{}' is not a number: name the score's "
                        "field with --score-key",
                        flag, one_line(last_line.substr(0, 200))));
    }
    // A JSON string or list ("0.93", [0.93]) is not a number, even when it holds one.
    if (const auto start = last_line.find_first_not_of(" \t\r");
        start != std::string_view::npos && (last_line[start] == '"' || last_line[start] == '[')) {
        if (const auto j = parse_json_bounded(last_line, fmt::format("{}: the command's output", flag));
            !j.is_discarded())
            throw InputError(
                fmt::format("{}: its last line '{}' is a JSON {}, not a number: print the score as "
                            "a number, or name a JSON field with --score-key",
                            flag, one_line(last_line.substr(0, 200)), j.type_name()));
    }
    const auto numbers = numbers_in(last_line);
    if (numbers.size() == 1) return numbers.front();
    // A long line of many numbers (a dump of values, a progress bar) is no score line: said so, not
    // counted.
    if (last_line.size() > kMaxScoreLine)
        throw InputError(fmt::format(
            "{}: its last line is {} bytes long, too long for a score line (at most {} bytes): print a "
            "line 'diffract-score: X' last, or name a JSON field with --score-key",
            flag, last_line.size(), kMaxScoreLine));
    throw InputError(fmt::format(
        "{}: {}: print a line 'diffract-score: X', end the output with a line holding one number, or "
        "name a JSON field with --score-key",
        flag,
        last_line.empty() ? std::string("the command printed nothing on stdout")
        : numbers.empty()
            ? fmt::format("its last line '{}' holds no number", one_line(last_line.substr(0, 200)))
            : fmt::format("its last line '{}' holds {} numbers", one_line(last_line.substr(0, 200)),
                          numbers.size())));
}

std::vector<double> parse_chunks(const std::string& text, const std::string& key, const std::string& flag) {
    // The last JSON line that holds "chunks" (the shipped evaluators print one line, last).
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
        const auto line = json_object_line<nlohmann::ordered_json>(*it, flag);
        if (!line || !line->contains("chunks")) continue;
        const auto& j = *line;
        const auto& c = j["chunks"];
        // A list applies to the score; an object gives one list per score field: the --score-key's last
        // component, else the line's last member (the default score).
        const nlohmann::ordered_json* list = &c;
        if (c.is_object()) {
            std::string name = key.empty() ? (j.empty() ? "" : std::prev(j.end()).key()) : key;
            if (const auto dot = name.rfind('.'); dot != std::string::npos) name = name.substr(dot + 1);
            if (!c.contains(name)) return {};
            list = &c[name];
        }
        if (list->is_null()) return {};
        if (!list->is_array())
            throw InputError(
                fmt::format("{}: \"chunks\" is {}, not a list of numbers (nor an object of such "
                            "lists per score field)",
                            flag, one_line(json_preview(*list))));
        std::vector<double> out;
        for (const auto& v : *list) {
            if (!v.is_number() || !std::isfinite(v.get<double>()))
                throw InputError(fmt::format("{}: \"chunks\" holds {}, not finite numbers", flag,
                                             one_line(json_preview(v))));
            out.push_back(v.get<double>());
        }
        return out;
    }
    return {};
}

namespace {

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

Evaluation raw_score(const EvalCommand& e, const std::string& model_path, const std::string& flag,
                     const std::string& log_path) {
    if (e.in_process) return {e.in_process(model_path), {}};
    if (e.python.empty() && e.command.find("{python}") != std::string::npos)
        throw InputError(
            fmt::format("{}: '{{python}}' needs an interpreter (set DIFFRACT_PYTHON or put "
                        "python3 on PATH)",
                        flag));
    // One pass, so that a path holding "{python}" is not replaced again.
    std::string cmd;
    for (std::size_t i = 0; i < e.command.size();) {
        const std::string_view rest = std::string_view(e.command).substr(i);
        if (rest.starts_with("{model}")) {
            cmd += shell_quote(model_path), i += 7;
        } else if (rest.starts_with("{python}")) {
            cmd += shell_quote(e.python), i += 8;
        } else {
            cmd += e.command[i++];
        }
    }
    Log log(log_path, flag);
    log.write(fmt::format("== {}: {}\n", flag, cmd));
    int out_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0)
        throw InputError(fmt::format("{}: cannot run '{}': {}", flag, e.command, std::strerror(errno)));
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int err = errno;
        ::close(out_pipe[0]), ::close(out_pipe[1]);
        throw InputError(fmt::format("{}: cannot run '{}': {}", flag, e.command, std::strerror(err)));
    }
    if (pid == 0) {
        // The child: a process group of its own, stdout to the pipe, stderr to the log, default signals.
        ::setpgid(0, 0);
        ::signal(SIGINT, SIG_DFL), ::signal(SIGTERM, SIG_DFL), ::signal(SIGPIPE, SIG_DFL);
        ::dup2(out_pipe[1], STDOUT_FILENO);
        ::dup2(log.fd(), STDERR_FILENO);
        supervise_evaluation(parent, cmd.c_str());
    }
    ::setpgid(pid, pid);  // also here: no race with the child's own call
    ::close(out_pipe[1]);
    Child child{pid};
    struct Reader {
        int fd;
        ~Reader() { ::close(fd); }
    } reader{out_pipe[0]};
    const auto start = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> exited_at;
    std::string out, unlogged;
    try {
        // Until the shell has exited and its stdout is closed, with the timeout and interrupts checked
        // every 100 ms.
        for (bool open = true;;) {
            int ready = 0;
            if (open) {
                pollfd p{reader.fd, POLLIN, 0};
                ready = ::poll(&p, 1, 100);
            } else {
                ::usleep(100000);
            }
            if (ready > 0) {
                char buf[65536];
                const ssize_t n = ::read(reader.fd, buf, sizeof buf);
                if (n > 0) {
                    // The log keeps everything, whole lines at a time (so that the command's stderr,
                    // appended directly, falls between lines); the score needs only the end of the output.
                    const std::string_view chunk(buf, static_cast<std::size_t>(n));
                    if (const auto nl = chunk.rfind('\n'); nl != std::string_view::npos) {
                        log.write(unlogged + std::string(chunk.substr(0, nl + 1)));
                        unlogged.assign(chunk.substr(nl + 1));
                    } else {
                        unlogged.append(chunk);
                    }
                    if (unlogged.size() > kKeptOutput) log.write(std::exchange(unlogged, std::string()));
                    out.append(buf, static_cast<std::size_t>(n));
                    if (out.size() > kKeptOutput) out.erase(0, out.size() - kKeptOutput / 2);
                } else if (n == 0 || errno != EINTR) {
                    open = false;
                }
            }
            if (!exited_at && child.reap(false)) exited_at = std::chrono::steady_clock::now();
            if (exited_at && !open) break;
            // A background child the command left holding stdout open: the command is over once its
            // shell has exited and the pipe has been quiet for a moment (the group is ended below).
            if (exited_at && open && ready == 0 &&
                std::chrono::steady_clock::now() - *exited_at > std::chrono::milliseconds(500))
                break;
            if (cancel_requested()) {
                child.end_group(std::chrono::milliseconds(2000));
                log.write("\n== interrupted\n");
                throw Cancelled();
            }
            if (e.timeout_seconds > 0 &&
                std::chrono::steady_clock::now() - start > std::chrono::duration<double>(e.timeout_seconds)) {
                child.end_group(std::chrono::milliseconds(2000));
                log.write(fmt::format("\n== timed out after {} s\n", e.timeout_seconds));
                throw InputError(fmt::format(
                    "{}: the command ran past --eval-timeout ({} s) on {}; it and its children were ended "
                    "(its output: {})",
                    flag, e.timeout_seconds, model_path, log_path));
            }
        }
    } catch (...) {
        if (!child.exited) child.end_group(std::chrono::milliseconds(2000));
        throw;
    }
    log.write(unlogged);
    // Whatever the command left running in its group is ended with it (the shell has been reaped or
    // is waited for here).
    child.reap(true);
    ::kill(-pid, SIGKILL);
    const int status = child.status;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const std::string how = WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                                : fmt::format("exit status {}", code);
    log.write(fmt::format("{}== {}\n", out.empty() || out.back() == '\n' ? "" : "\n", how));
    log.close();
    if (code != 0)
        throw InputError(fmt::format("{}: command failed ({}) on {}: {} (its output: {})", flag, how,
                                     model_path, e.command, log_path));
    try {
        return {parse_score(out, e.score_key, flag), parse_chunks(out, e.score_key, flag)};
    } catch (const InputError& error) {
        throw InputError(fmt::format("{} (its output: {})", error.what(), log_path));
    }
}

}  // namespace

Evaluation evaluate(const EvalCommand& e, const std::string& model_path, const std::string& flag,
                    const std::string& log_path) {
    // Every score, from a command or an in-process callable, is a finite number: a NaN or ±Inf would
    // be ranked, journaled as null and read back as NaN on a resume.
    auto result = raw_score(e, model_path, flag, log_path);
    if (!std::isfinite(result.score))
        throw InputError(fmt::format("{}: the score of {} is {}, not a finite number{}", flag, model_path,
                                     result.score,
                                     e.in_process ? "" : fmt::format(" (its output: {})", log_path)));
    return result;
}

}  // namespace diffract::sweep
