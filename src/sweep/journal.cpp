#include "journal.hpp"

#include <fstream>

#include <fmt/format.h>

#include "diffract/core/atomic_file.hpp"
#include "diffract/core/csv_field.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/core/output_path.hpp"

namespace diffract::sweep::detail {
namespace {

double json_number(const nlohmann::json& j, const char* key) {
    // null (NaN when written) and a field an older journal lacks read back as NaN
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : kNaN;
}

Scores scores_of(const nlohmann::json& j) {
    Scores s{json_number(j, "score"), json_number(j, "select_score"), json_number(j, "report_score"),
             json_number(j, "eval_seconds")};
    if (j.contains("chunks") && j["chunks"].is_array())
        for (const auto& v : j["chunks"])
            if (v.is_number()) s.chunks.push_back(v.get<double>());
    return s;
}

void put_scores(nlohmann::json& j, const Scores& s) {
    j["score"] = number_json(s.score);
    j["select_score"] = number_json(s.select_score);
    j["report_score"] = number_json(s.report_score);
    j["eval_seconds"] = number_json(s.eval_seconds);
    if (!s.chunks.empty()) j["chunks"] = s.chunks;
}

std::string record_id(const std::string& order, std::uint64_t seed, double x) {
    return fmt::format("{}|{}|{}", order, seed, format_value(x));
}

}  // namespace

Journal::Journal(const std::string& path, const nlohmann::json& fingerprint) : path_(path) {
    bool has_header = false;
    // Read and appended to: a FIFO or device in its place would block or swallow the journal.
    check_output_kind(path, OutputKind::file, "the sweep's journal");
    if (std::ifstream in(path); in) {
        std::string line;
        while (std::getline(in, line)) {
            const auto j = parse_json_bounded(line, path);
            if (j.is_discarded() || !j.is_object()) continue;  // a line cut short by an interruption
            if (j.contains("fingerprint")) {
                if (j["fingerprint"] != json_round_trip(fingerprint))
                    throw_input_error(
                        path, "",
                        "recorded for a different sweep (inputs, grid or commands); use another --out");
                has_header = true;
            } else if (j.contains("reference")) {
                references_[j.value("reference", "")] = scores_of(j);
            } else {
                by_content_[j.value("content", "")] = scores_of(j);
                recorded_.insert(
                    record_id(j.value("order", ""), j.value("seed", std::uint64_t{0}), json_number(j, "x")));
            }
        }
    }
    if (!has_header) append(nlohmann::json{{"fingerprint", fingerprint}});
}

const Scores* Journal::content(const std::string& content) const {
    const auto it = by_content_.find(content);
    return it == by_content_.end() ? nullptr : &it->second;
}

const Scores* Journal::reference(RefRole role) const {
    const auto it = references_.find(std::string(role_name(role)));
    return it == references_.end() ? nullptr : &it->second;
}

void Journal::add(const Record& r) {
    by_content_[r.content] = r.scores;
    const std::string order(order_name(r.order));
    if (!recorded_.insert(record_id(order, r.seed, r.x)).second) return;
    nlohmann::json j{{"order", order}, {"seed", r.seed}, {"x", r.x}, {"content", r.content}};
    put_scores(j, r.scores);
    append(j);
}

void Journal::add(const Reference& r) {
    const std::string role(role_name(r.role));
    references_[role] = r.scores;
    nlohmann::json j{{"reference", role}, {"path", r.path}};
    put_scores(j, r.scores);
    append(j);
}

// Every line is checked and flushed: a full disk stops the sweep with exit 2, and a resumed run never
// trusts a line that was not written whole.
void Journal::append(const nlohmann::json& line) const { append_to_file(path_, json_text(line) + "\n"); }

}  // namespace diffract::sweep::detail
