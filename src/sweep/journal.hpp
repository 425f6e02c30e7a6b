// The resume journal DIR/sweep_state.jsonl: a first line with the sweep's fingerprint, then a line per
// candidate {order, seed, x, content, score, select_score, report_score, eval_seconds} and per
// reference point {reference: ROLE, path, score, ..., eval_seconds}, each appended as soon as known.
#pragma once

#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "diffract/sweep/sweep.hpp"

namespace diffract::sweep::detail {

class Journal {
public:
    // Reads what `path` records (a line cut short by an interruption is ignored), refuses a journal
    // recorded for another fingerprint, and writes the fingerprint line to a new journal.
    Journal(const std::string& path, const nlohmann::json& fingerprint);

    // The scores recorded for this content or reference role, or null.
    const Scores* content(const std::string& content) const;
    const Scores* reference(RefRole role) const;

    // Records a candidate (its line once per (order, seed, x)) or a reference point.
    void add(const Record& r);
    void add(const Reference& r);

private:
    void append(const nlohmann::json& line) const;
    std::string path_;
    std::map<std::string, Scores> by_content_, references_;
    std::set<std::string> recorded_;  // (order, seed, x) of the candidate lines
};

}  // namespace diffract::sweep::detail
