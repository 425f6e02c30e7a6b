#include "diffract/report/config.hpp"

#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/core/split_list.hpp"
#include "diffract/report/palette.hpp"

namespace diffract::report {
namespace {

using nlohmann::json;

std::string as_string(const json& v, const std::string& where) {
    if (!v.is_string()) throw InputError(fmt::format("{}: expected a string", where));
    return v.get<std::string>();
}

std::vector<std::string> as_list(const json& v, const std::string& where) {
    if (v.is_string()) return split_list(v.get<std::string>());
    if (!v.is_array())
        throw InputError(fmt::format("{}: expected a list or a comma-separated string", where));
    std::vector<std::string> out;
    for (const auto& item : v) out.push_back(as_string(item, where));
    return out;
}

// A layer index: an integer ≥ 0.
int overlap_layer_value(const json& v, const std::string& where) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 1 << 30)
        throw InputError(
            fmt::format("{}: expected a layer index (an integer >= 0), found {}", where, v.dump()));
    return v.get<int>();
}

}  // namespace

void read_config_file(const std::string& path, ReportConfig& c) {
    std::ifstream in(path);
    if (!in) throw InputError(fmt::format("{}: cannot open config file", path));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    read_config_json(text, path, c);
}

void read_config_json(const std::string& text, const std::string& source, ReportConfig& c) {
    const std::string& path = source;
    const json j = parse_json_bounded(text, path);
    if (j.is_discarded() || !j.is_object()) throw InputError(fmt::format("{}: not a JSON object", path));
    for (const auto& [key, v] : j.items()) {
        const std::string where = fmt::format("{}: key '{}'", path, key);
        if (key == "title")
            c.title = as_string(v, where);
        else if (key == "metrics")
            c.metrics = as_list(v, where);
        else if (key == "roles")
            c.roles = fmt::format("{}", fmt::join(as_list(v, where), ","));
        else if (key == "layers")
            c.layers = v.is_number_integer() ? std::to_string(v.get<int>()) : as_string(v, where);
        else if (key == "models")
            c.models = as_list(v, where);
        else if (key == "heatmap_role")
            c.heatmap_role = as_string(v, where);
        else if (key == "agreement_field")
            c.agreement_field = as_string(v, where);
        else if (key == "reference")
            c.reference = as_string(v, where);
        else if (key == "esd_tensor")
            c.esd_tensor = as_string(v, where);
        else if (key == "scatter") {
            c.scatter = as_list(v, where);
            if (c.scatter.size() != 2) throw InputError(fmt::format("{}: expected two metric names", where));
        } else if (key == "evolution") {
            if (!v.is_boolean()) throw InputError(fmt::format("{}: expected true or false", where));
            c.evolution = v.get<bool>();
        } else if (key == "overlap_layer") {
            c.overlap_layer = overlap_layer_value(v, where);
        } else if (key == "colours" || key == "colors") {
            if (!v.is_object()) throw InputError(fmt::format("{}: expected an object name → colour", where));
            for (const auto& [name, colour] : v.items()) {
                c.colours[name] = as_string(colour, where);
                check_colour(c.colours[name], where);
            }
        } else {
            throw InputError(
                fmt::format("{}: unknown key (expected title, metrics, roles, layers, models, colours, "
                            "heatmap_role, agreement_field, reference, esd_tensor, scatter, evolution, "
                            "overlap_layer)",
                            where));
        }
    }
}

}  // namespace diffract::report
