// Loading a results store: spectra (weights_svals of whole matrices, with their scalar fields), the
// updates' spectra (delta_svals of whole-matrix compare results) and,
// for a report from a store alone, every scalar result as a metrics or compare record.
#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "diffract/analysis/catalog.hpp"
#include "diffract/core/error.hpp"
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

}  // namespace

void load_store(const std::string& path, ReportData& data, bool with_records) {
    if (!std::filesystem::is_regular_file(path)) throw InputError(fmt::format("{}: store not found", path));
    using Key =
        std::tuple<std::string, std::string, std::string, std::string>;  // model, other, tensor, block
    std::map<Key, Record> records;
    std::map<Key, std::vector<double>> svals, deltas;
    std::vector<Key> order;
    data.store_loaded = true;
    run::for_each_stored_result(path, [&](const run::StoredResult& row) {
        if (std::find(data.store_models.begin(), data.store_models.end(), row.model) ==
            data.store_models.end())
            data.store_models.push_back(row.model);
        const Key key{row.model, row.other, row.tensor, row.block};
        auto [it, fresh] = records.try_emplace(key);
        if (fresh) {
            it->second.model = row.model;
            it->second.base = row.other;
            it->second.tensor = row.tensor;
            set_block(it->second, row.block);
            order.push_back(key);
        }
        if (row.field == "weights_svals" && !row.vec.empty() && row.other.empty() && row.block.empty())
            svals.try_emplace(key, row.vec);
        else if (row.field == "delta_svals" && !row.vec.empty() && !row.other.empty() && row.block.empty())
            deltas.try_emplace(key, row.vec);
        else if (!row.vec.empty() || row.field.empty())
            return;
        else if (row.field == analysis::kPrecisionField)
            it->second.precision = row.value ? analysis::precision_name(*row.value) : "";
        else
            it->second.values.try_emplace(row.field,
                                          row.value ? *row.value : std::numeric_limits<double>::quiet_NaN());
    });
    for (const auto& key : order) {
        auto& rec = records[key];
        if (auto sv = svals.find(key); sv != svals.end())
            data.spectra.push_back({rec.model, rec.tensor, sv->second, rec.values});
        if (auto d = deltas.find(key); d != deltas.end())
            data.deltas.push_back({rec.model, rec.base, rec.tensor, rec.role, rec.layer, d->second});
        if (!with_records) continue;
        data.add_model(rec.model);
        (rec.base.empty() ? data.metrics : data.compare).push_back(rec);
    }
}

}  // namespace diffract::report
