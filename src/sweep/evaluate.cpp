// Running an evaluation: the shell command with the candidate's path, its output kept in a log file
// (not interleaved with the sweep's progress), and the score read from its stdout.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/sweep/sweep.hpp"

namespace diffract::sweep {
namespace {

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

using File = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

// Appends `text` to the log at once, so that it lands in order with what the command's stderr appends.
void log_write(std::FILE* log, const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), log);
    std::fflush(log);
}

}  // namespace

double parse_score(const std::string& text, const std::string& key, const std::string& flag) {
    if (!key.empty()) {
        std::vector<std::string> lines;
        std::istringstream in(text);
        for (std::string l; std::getline(in, l);) lines.push_back(l);
        lines.push_back(text);  // a JSON document spread over several lines
        for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
            const auto j = nlohmann::json::parse(*it, nullptr, false);
            if (j.is_discarded() || !j.is_object()) continue;
            const nlohmann::json* v = &j;
            std::istringstream path(key);
            for (std::string part; v && std::getline(path, part, '.');)
                v = v->is_object() && v->contains(part) ? &(*v)[part] : nullptr;
            if (v && v->is_number()) return v->get<double>();
        }
        throw InputError(fmt::format("{}: no JSON line on stdout has a numeric field '{}'", flag, key));
    }
    static const std::regex number(R"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)");
    std::string last;
    for (std::sregex_iterator it(text.begin(), text.end(), number), end; it != end; ++it) last = it->str();
    if (last.empty()) throw InputError(fmt::format("{}: the command printed no number on stdout", flag));
    // strtod, not stod: a number beyond a double's range is the evaluator's output, not our error. An
    // overflow is refused (by evaluate); an underflow is the nearest double (0 or subnormal).
    return std::strtod(last.c_str(), nullptr);
}

namespace {

double raw_score(const EvalCommand& e, const std::string& model_path, const std::string& flag,
                 const std::string& log_path) {
    if (e.in_process) return e.in_process(model_path);
    std::string cmd = e.command;
    const std::string quoted = shell_quote(model_path);
    for (std::size_t p = cmd.find("{model}"); p != std::string::npos;
         p = cmd.find("{model}", p + quoted.size()))
        cmd.replace(p, 7, quoted);
    File log(std::fopen(log_path.c_str(), "a"), &std::fclose);
    if (!log) throw InputError(fmt::format("{}: cannot write the evaluation log {}", flag, log_path));
    log_write(log.get(), fmt::format("== {}: {}\n", flag, cmd));
    // The subshell's stderr is appended to the log; its stdout comes here and is logged as it arrives.
    // (Newlines around the command: a trailing comment in it cannot swallow the redirection.)
    const std::string shell = fmt::format("(\n{}\n) 2>>{}", cmd, shell_quote(log_path));
    std::fflush(nullptr);
    std::FILE* pipe = popen(shell.c_str(), "r");
    if (!pipe) throw InputError(fmt::format("{}: cannot run '{}'", flag, e.command));
    std::string out;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) {
        out.append(buf, n);
        log_write(log.get(), std::string(buf, n));
    }
    const int status = pclose(pipe);
    const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    log_write(log.get(),
              fmt::format("{}== exit status {}\n", out.empty() || out.back() == '\n' ? "" : "\n", code));
    if (code != 0)
        throw InputError(fmt::format("{}: command failed (exit status {}) on {}: {} (its output: {})", flag,
                                     code, model_path, e.command, log_path));
    try {
        return parse_score(out, e.score_key, flag);
    } catch (const InputError& error) {
        throw InputError(fmt::format("{} (its output: {})", error.what(), log_path));
    }
}

}  // namespace

double evaluate(const EvalCommand& e, const std::string& model_path, const std::string& flag,
                const std::string& log_path) {
    // Every score, from a command or an in-process callable, is a finite number: a NaN or ±Inf would
    // be ranked, journaled as null and read back as NaN on a resume.
    const double score = raw_score(e, model_path, flag, log_path);
    if (!std::isfinite(score))
        throw InputError(fmt::format("{}: the score of {} is {}, not a finite number{}", flag, model_path,
                                     score, e.in_process ? "" : fmt::format(" (its output: {})", log_path)));
    return score;
}

}  // namespace diffract::sweep
