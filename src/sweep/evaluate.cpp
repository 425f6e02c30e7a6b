// Running an evaluation: the shell command with the candidate's path, run by the core's subprocess runner
// (core/subprocess.hpp: a process group of its own, a log file, a timeout), and the score read from its
// stdout by one documented rule (docs/evaluators.md, "The score").
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/core/subprocess.hpp"
#include "diffract/sweep/sweep.hpp"

namespace diffract::sweep {
namespace {

constexpr std::size_t kMaxScoreLine = 4096;  // a longer last line of many numbers: "too long"

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

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

// The command with `{model}` and `{python}` replaced by their single-quoted values, in one pass (so that
// a path holding "{python}" is not replaced again).
std::string shell_command(const EvalCommand& e, const std::string& model_path, const std::string& flag) {
    if (e.python.empty() && e.command.find("{python}") != std::string::npos)
        throw InputError(
            fmt::format("{}: '{{python}}' needs an interpreter (set DIFFRACT_PYTHON or put "
                        "python3 on PATH)",
                        flag));
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
    return cmd;
}

Evaluation raw_score(const EvalCommand& e, const std::string& model_path, const std::string& flag,
                     const std::string& log_path) {
    if (e.in_process) return {e.in_process(model_path), {}};
    const auto out = run_logged_command({shell_command(e, model_path, flag), e.command, flag, log_path,
                                         model_path, e.timeout_seconds, "--eval-timeout"});
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
