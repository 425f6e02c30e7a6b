// diffract metrics [--table metrics|compare|heads] [--json] [FIELD...]: the catalog of every table's
// fields — name, level, default, inputs, formula — as text that fits 100 columns, or as JSON.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/compare.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/spelling.hpp"

namespace diffract::cli {
namespace {

struct Entry {
    std::string name, level, in_default, inputs, formula;
    std::vector<std::string> cost;  // metrics table only: what computing it costs per matrix
};

std::vector<Entry> entries(const std::string& table) {
    std::vector<Entry> out;
    if (table == "heads") {
        for (const auto& f : analysis::head_fields())
            out.push_back(
                {std::string(f.name), "head", "yes", "compare.csv rows of the head", std::string(f.formula)});
        return out;
    }
    if (table == "compare") {
        for (const auto& f : analysis::compare_field_catalog()) {
            const bool vector = std::string_view(f.formula).starts_with("vector:");
            out.push_back({std::string(f.name), "CROSS_MODEL", vector ? "vector" : "yes",
                           "the model's and the base's block", std::string(f.formula)});
        }
        return out;
    }
    if (table != "metrics")
        throw InputError(fmt::format("--table: expected metrics, compare or heads, found '{}'", table));
    for (const auto& f : analysis::field_catalog())
        if (f.level != analysis::Level::cross_model)
            out.push_back({std::string(f.name), std::string(analysis::level_name(f.level)),
                           f.is_vector ? "vector" : (f.in_default ? "yes" : "no"), std::string(f.inputs),
                           std::string(f.formula), analysis::field_cost(f.name)});
    return out;
}

// `text` broken at spaces into lines of at most `width` characters.
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
    std::vector<std::string> lines{""};
    std::size_t start = 0;
    while (start < text.size()) {
        auto end = text.find(' ', start);
        if (end == std::string::npos) end = text.size();
        const auto word = text.substr(start, end - start);
        if (!lines.back().empty() && lines.back().size() + 1 + word.size() > width) lines.emplace_back();
        lines.back() += (lines.back().empty() ? "" : " ") + word;
        start = end + 1;
    }
    return lines;
}

}  // namespace

void add_metrics(CLI::App& app) {
    struct Args {
        std::string table = "metrics";
        bool json = false;
        std::vector<std::string> fields;
    };
    auto a = std::make_shared<Args>();
    auto* sub = app.add_subcommand("metrics", "List every field with its formula, level and inputs");
    sub->add_option("fields", a->fields, "Only these fields");
    sub->add_option("--table", a->table, "metrics (metrics.csv), compare (compare.csv) or heads (heads.csv)")
        ->capture_default_str();
    sub->add_flag("--json", a->json,
                  "One JSON array of objects (name, level, default, inputs, formula, cost)");
    on_run(sub, [a] {
        auto all = entries(a->table);
        std::vector<Entry> shown;
        if (a->fields.empty()) shown = all;
        std::vector<std::string> names;
        for (const auto& e : all) names.push_back(e.name);
        for (const auto& f : a->fields) {
            const auto it = std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.name == f; });
            if (it == all.end()) {
                const auto near = closest_spelling(f, names);
                throw InputError(fmt::format("metrics: no field '{}' in the {} table{}", f, a->table,
                                             near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near)));
            }
            shown.push_back(*it);
        }
        if (a->json) {
            auto j = nlohmann::ordered_json::array();
            for (const auto& e : shown)
                j.push_back({{"name", e.name},
                             {"table", a->table},
                             {"level", e.level},
                             {"default", e.in_default},
                             {"inputs", e.inputs},
                             {"formula", e.formula},
                             {"cost", e.cost}});
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        // A field: its name, level and whether it is computed by default; then its formula and its
        // inputs, indented and wrapped (every line fits 100 columns).
        for (const auto& e : shown) {
            fmt::print("{:<40} {:<12} default: {}\n", e.name, e.level, e.in_default);
            for (const auto& line : wrap(e.formula, 94)) fmt::print("    {}\n", line);
            if (!e.inputs.empty())
                for (const auto& line : wrap("inputs: " + e.inputs, 94)) fmt::print("    {}\n", line);
            if (!e.cost.empty()) {
                std::string cost;
                for (const auto& c : e.cost) cost += (cost.empty() ? "" : "; ") + c;
                for (const auto& line : wrap("cost: " + cost, 94)) fmt::print("    {}\n", line);
            }
        }
        return 0;
    });
}

}  // namespace diffract::cli
