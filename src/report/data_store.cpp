// Loading a results store: spectra (weights_svals of whole matrices, with their scalar fields), the
// updates' spectra (delta_svals of whole-matrix compare results) and,
// for a report from a store alone, every scalar result as a metrics or compare record.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "diffract/analysis/catalog.hpp"
#include "diffract/analysis/compare.hpp"
#include "diffract/analysis/custom_fields.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/model/schema.hpp"
#include "diffract/report/data.hpp"
#include "diffract/run/stored_results.hpp"

namespace diffract::report {
namespace {

// "attn_q:3" → (attn_q, 3); "" → the tensor's own role, no head.
void set_block(Record& rec, const std::string& block) {
    const auto tr = model::classify_tensor(rec.tensor);
    rec.layer = tr.layer;
    rec.role = std::string(model::role_name(tr.role));
    const auto colon = block.find(':');
    if (colon == std::string::npos) return;
    rec.role = block.substr(0, colon);
    try {
        rec.head = std::stoi(block.substr(colon + 1));
    } catch (const std::exception&) {
        rec.head.reset();
    }
}

using Unit = std::tuple<std::string, std::string, std::string, std::string>;  // model, other, tensor, block

// One unit's results under one run configuration.
struct Stored {
    Record rec;
    std::optional<std::vector<double>> svals, deltas;
};

// How the units' configurations went: units with results under more than one, and units with only an
// older version's (analysis::current_config), which the report notes.
struct Choice {
    std::size_t several = 0, only_older = 0;
};

// The configuration each unit's results are taken from. A store keeps every configuration a unit was
// computed under (--precision f32 and f64, other options, an older version's key), and one record must
// never mix fields of two: each unit takes one, this version's before an older one's, then the one most
// units of its table (analyze or compare) share, so the report is as uniform as the store allows (ties:
// the f64 tier, then by name).
Choice choose_configs(const std::map<Unit, std::map<std::string, Stored>>& units,
                      std::map<Unit, const Stored*>& chosen) {
    std::map<std::pair<bool, std::string>, std::size_t> share;  // (compare?, config) -> units
    for (const auto& [unit, configs] : units)
        for (const auto& [config, stored] : configs) ++share[{!std::get<1>(unit).empty(), config}];
    const auto rank = [&](bool compare, const std::string& config) {
        return std::tuple{analysis::current_config(config), share[{compare, config}],
                          analysis::f64_config(config)};
    };
    Choice choice;
    for (const auto& [unit, configs] : units) {
        const bool compare = !std::get<1>(unit).empty();
        auto best = configs.begin();
        for (auto it = std::next(best); it != configs.end(); ++it)
            if (rank(compare, it->first) > rank(compare, best->first)) best = it;  // ties: the first by name
        chosen[unit] = &best->second;
        choice.several += configs.size() > 1;
        choice.only_older += !analysis::current_config(best->first);
    }
    return choice;
}

}  // namespace

void load_store(const std::string& path, ReportData& data, bool with_records) {
    if (!std::filesystem::is_regular_file(path)) throw InputError(fmt::format("{}: store not found", path));
    std::map<Unit, std::map<std::string, Stored>> units;
    std::vector<Unit> order;
    data.store_loaded = true;
    run::for_each_stored_result(path, [&](const run::StoredResult& row) {
        if (std::find(data.store_models.begin(), data.store_models.end(), row.model) ==
            data.store_models.end())
            data.store_models.push_back(row.model);
        const Unit unit{row.model, row.other, row.tensor, row.block};
        auto [configs, new_unit] = units.try_emplace(unit);
        if (new_unit) order.push_back(unit);
        // A unit's built-in and custom fields of one run stay together under the run's configuration.
        auto [it, fresh] = configs->second.try_emplace(analysis::analysis_config_of(row.config));
        auto& stored = it->second;
        if (fresh) {
            stored.rec.model = row.model;
            stored.rec.base = row.other;
            stored.rec.tensor = row.tensor;
            set_block(stored.rec, row.block);
        }
        if (row.field == "weights_svals" && !row.vec.empty() && row.other.empty() && row.block.empty())
            stored.svals = row.vec;
        else if (row.field == "delta_svals" && !row.vec.empty() && !row.other.empty() && row.block.empty())
            stored.deltas = row.vec;
        else if (!row.vec.empty() || row.field.empty())
            return;
        else if (row.field == kPrecisionField)
            stored.rec.precision =
                row.value ? value_of(analysis::kPrecisionNames, analysis::precision_name(*row.value))
                          : std::nullopt;
        else
            stored.rec.values.try_emplace(row.field, row.value ? *row.value : kNaN);
    });
    std::map<Unit, const Stored*> chosen;
    const auto choice = choose_configs(units, chosen);
    if (choice.several)
        data.notes.push_back(fmt::format(
            "{}: {} of its {} units (a matrix or head block of a model or pair) hold results under more than "
            "one configuration (another --precision, other options or an older version): each shows one "
            "configuration's results, never a mix (this version's, then the one most units share)",
            path, choice.several, units.size()));
    if (choice.only_older)
        data.notes.push_back(fmt::format(
            "{}: {} units have only an older diffract version's results, shown as they were stored; run "
            "analyze or compare again with this store to recompute them",
            path, choice.only_older));
    for (const auto& unit : order) {
        const auto& stored = *chosen.at(unit);
        const auto& rec = stored.rec;
        if (stored.svals) data.spectra.push_back({rec.model, rec.tensor, *stored.svals, rec.values});
        if (stored.deltas)
            data.deltas.push_back({rec.model, rec.base, rec.tensor, rec.role, rec.layer, *stored.deltas});
        if (!with_records) continue;
        data.add_model(rec.model);
        (rec.base.empty() ? data.metrics : data.compare).push_back(rec);
    }
}

}  // namespace diffract::report
