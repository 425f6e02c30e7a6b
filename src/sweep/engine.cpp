// The sweep engine: evaluation commands, the resumable journal, curves and their summary.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "diffract/core/atomic_file.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/sweep/sweep.hpp"

namespace fs = std::filesystem;

namespace diffract::sweep {
namespace {

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

double json_number(const nlohmann::json& j) {
    return j.is_number() ? j.get<double>() : kNaN;  // null (NaN when written) reads back as NaN
}

nlohmann::json number_json(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

std::string record_id(const std::string& order, std::uint64_t seed, double x) {
    return fmt::format("{}|{}|{}", order, seed, analysis::format_value(x));
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? kNaN : s / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
    if (v.size() < 2) return v.empty() ? kNaN : 0.0;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size() - 1));
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
    return std::stod(last);
}

double evaluate(const EvalCommand& e, const std::string& model_path, const std::string& flag) {
    std::string cmd = e.command;
    const std::string quoted = shell_quote(model_path);
    for (std::size_t p = cmd.find("{model}"); p != std::string::npos;
         p = cmd.find("{model}", p + quoted.size()))
        cmd.replace(p, 7, quoted);
    std::fflush(nullptr);
    std::FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) throw InputError(fmt::format("{}: cannot run '{}'", flag, e.command));
    std::string out;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
    const int status = pclose(pipe);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw InputError(fmt::format("{}: command failed (exit status {}) on {}: {}", flag,
                                     WIFEXITED(status) ? WEXITSTATUS(status) : -1, model_path, e.command));
    return parse_score(out, e.score_key, flag);
}

std::vector<Record> run_candidates(const SweepConfig& c, const std::vector<Candidate>& candidates) {
    if (c.eval.empty() && (c.select_eval.empty() || c.report_eval.empty()))
        throw InputError("sweep: give --eval, or both --select-eval and --report-eval");
    if (static_cast<std::int64_t>(candidates.size()) > c.max_candidates)
        edit::throw_too_many_candidates("sweep", static_cast<double>(candidates.size()), c.max_candidates);
    fs::create_directories(c.out_dir);
    const fs::path journal = fs::path(c.out_dir) / "sweep_state.jsonl";

    // Resume: what the journal holds, by content and by (order, seed, x).
    std::map<std::string, Record> by_content;
    std::set<std::string> recorded;
    bool has_header = false;
    if (std::ifstream in(journal); in) {
        std::string line;
        for (int n = 1; std::getline(in, line); ++n) {
            const auto j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_discarded()) continue;  // a line cut short by an interruption
            if (j.contains("fingerprint")) {
                if (j["fingerprint"] != json_round_trip(c.fingerprint))
                    throw_input_error(
                        journal.string(), "",
                        "recorded for a different sweep (inputs, grid or commands); use another --out");
                has_header = true;
                continue;
            }
            Record r{j.value("order", ""),          j.value("seed", std::uint64_t{0}),
                     json_number(j["x"]),           j.value("content", ""),
                     json_number(j["score"]),       json_number(j["select_score"]),
                     json_number(j["report_score"])};
            by_content[r.content] = r;
            recorded.insert(record_id(r.order, r.seed, r.x));
        }
    }
    if (c.candidate_bytes > 0) {
        std::uint64_t pending = 0;
        std::set<std::string> contents;
        for (const auto& cand : candidates)
            if (!by_content.count(cand.content) && contents.insert(cand.content).second) ++pending;
        if (!c.keep) pending = std::min<std::uint64_t>(pending, 1);
        edit::check_free_space(c.out_dir, pending * c.candidate_bytes,
                               fmt::format("{} candidate checkpoint{}", pending, pending == 1 ? "" : "s"));
    }
    // Every journal line is checked and flushed: a full disk stops the sweep with exit 2, and a
    // resumed run never trusts a line that was not written whole.
    auto journal_line = [&](const nlohmann::json& j) {
        append_to_file(journal.string(), json_text(j) + "\n");
    };
    if (!has_header) journal_line(nlohmann::json{{"fingerprint", c.fingerprint}});

    const fs::path work = fs::path(c.out_dir) / (c.keep ? "candidates" : ".candidates");
    std::vector<Record> out;
    std::size_t evaluated = 0, reused = 0;
    for (const auto& cand : candidates) {
        Record r{cand.order, cand.seed, cand.x, cand.content};
        if (auto it = by_content.find(cand.content); it != by_content.end()) {
            r.score = it->second.score, r.select_score = it->second.select_score;
            r.report_score = it->second.report_score;
            ++reused;
        } else {
            const fs::path dir = work / cand.label;
            std::error_code ec;
            fs::remove_all(dir, ec);  // a candidate left by an interrupted run
            fs::create_directories(work);
            cand.build(dir.string());
            try {
                if (!c.eval.empty()) r.score = evaluate(c.eval, dir.string(), "--eval");
                if (!c.select_eval.empty())
                    r.select_score = evaluate(c.select_eval, dir.string(), "--select-eval");
                if (!c.report_eval.empty())
                    r.report_score = evaluate(c.report_eval, dir.string(), "--report-eval");
            } catch (...) {
                if (!c.keep) fs::remove_all(dir, ec);
                throw;
            }
            if (!c.keep) fs::remove_all(dir, ec);
            by_content[cand.content] = r;
            ++evaluated;
            if (!c.quiet)
                fmt::print(stderr, "sweep: {} seed {} x={}: score {}\n", cand.order, cand.seed,
                           analysis::format_value(cand.x), analysis::format_value(r.curve_score()));
        }
        if (recorded.insert(record_id(r.order, r.seed, r.x)).second) {
            journal_line(nlohmann::json{{"order", r.order},
                                        {"seed", r.seed},
                                        {"x", r.x},
                                        {"content", r.content},
                                        {"score", number_json(r.score)},
                                        {"select_score", number_json(r.select_score)},
                                        {"report_score", number_json(r.report_score)}});
        }
        out.push_back(r);
    }
    std::error_code ec;
    if (!c.keep) fs::remove(work, ec);  // only when empty
    if (!c.quiet) fmt::print(stderr, "sweep: {} candidates evaluated, {} reused\n", evaluated, reused);
    return out;
}

double trapezoid_auc(std::vector<std::pair<double, double>> p) {
    std::sort(p.begin(), p.end());
    double a = 0;
    for (std::size_t i = 1; i < p.size(); ++i)
        a += 0.5 * (p[i].first - p[i - 1].first) * (p[i].second + p[i - 1].second);
    return a;
}

nlohmann::json summarize(const SweepConfig& c, const std::string& kind, const std::vector<Record>& records) {
    // Curves: (order, seed) -> points, in first-seen order.
    std::vector<std::pair<std::string, std::uint64_t>> curves;
    std::map<std::pair<std::string, std::uint64_t>, std::vector<const Record*>> points;
    std::vector<std::string> orders;
    for (const auto& r : records) {
        const auto key = std::pair(r.order, r.seed);
        if (!points.count(key)) curves.push_back(key);
        if (std::find(orders.begin(), orders.end(), r.order) == orders.end()) orders.push_back(r.order);
        points[key].push_back(&r);
    }
    std::map<std::string, std::vector<double>> aucs;
    std::map<std::string, std::vector<std::uint64_t>> seeds;
    for (const auto& key : curves) {
        std::vector<std::pair<double, double>> xy;
        for (const auto* r : points[key]) xy.emplace_back(r->x, r->curve_score());
        aucs[key.first].push_back(trapezoid_auc(xy));
        seeds[key.first].push_back(key.second);
    }
    nlohmann::ordered_json s;
    s["sweep"] = kind;
    s["score"] = c.eval.empty() ? "select" : "eval";
    const bool has_random = aucs.count("random") > 0;
    const double rmean = has_random ? mean(aucs["random"]) : kNaN,
                 rstd = has_random ? stddev(aucs["random"]) : kNaN;
    if (has_random)
        s["random"] = {{"auc_mean", number_json(rmean)},
                       {"auc_std", number_json(rstd)},
                       {"seeds", aucs["random"].size()}};
    for (const auto& o : orders) {
        const auto& a = aucs[o];
        nlohmann::ordered_json j;
        j["seeds"] = seeds[o];
        j["aucs"] = a;
        j["auc_mean"] = number_json(mean(a));
        j["auc_std"] = number_json(stddev(a));
        if (has_random) {
            j["auc_diff_vs_random"] = number_json(mean(a) - rmean);
            j["auc_ratio_vs_random"] = number_json(mean(a) / rmean);
            j["z_vs_random"] = number_json(rstd > 0 ? (mean(a) - rmean) / rstd : kNaN);
        }
        s["orders"][o] = j;
    }
    if (!c.select_eval.empty() && !c.report_eval.empty()) {
        for (const auto& o : orders) {
            nlohmann::ordered_json per;
            std::vector<double> reported, gains;
            for (const auto& key : curves) {
                if (key.first != o) continue;
                const Record* best = nullptr;
                const Record* unedited = nullptr;
                for (const auto* r : points[key]) {
                    if (!best || r->select_score > best->select_score) best = r;
                    if (r->x == 0) unedited = r;
                }
                const double gain = unedited ? best->report_score - unedited->report_score : kNaN;
                per["curves"].push_back({{"seed", key.second},
                                         {"x", best->x},
                                         {"select_score", number_json(best->select_score)},
                                         {"report_score", number_json(best->report_score)},
                                         {"report_gain_vs_x0", number_json(gain)}});
                reported.push_back(best->report_score);
                gains.push_back(gain);
            }
            per["report_mean"] = number_json(mean(reported));
            per["report_std"] = number_json(stddev(reported));
            per["report_gain_mean"] = number_json(mean(gains));
            s["selection"][o] = per;
        }
    }
    return s;
}

void write_outputs(const SweepConfig& c, const std::string& kind, const std::vector<Record>& records) {
    const bool both = !c.select_eval.empty() || !c.report_eval.empty();
    std::string csv = both ? "order,seed,x,score,select_score,report_score\n" : "order,seed,x,score\n";
    for (const auto& r : records) {
        csv += fmt::format("{},{},{},{}", r.order, r.seed, analysis::format_value(r.x),
                           analysis::format_value(r.curve_score()));
        if (both)
            csv += fmt::format(",{},{}", analysis::format_value(r.select_score),
                               analysis::format_value(r.report_score));
        csv += "\n";
    }
    const fs::path dir(c.out_dir);
    write_file_atomically((dir / "curve.csv").string(), csv);
    write_file_atomically((dir / "summary.json").string(), json_text(summarize(c, kind, records), 2) + "\n");
    if (!c.quiet)
        fmt::print(stderr, "sweep {}: {} points -> {}/curve.csv, {}/summary.json\n", kind, records.size(),
                   c.out_dir, c.out_dir);
}

}  // namespace diffract::sweep
