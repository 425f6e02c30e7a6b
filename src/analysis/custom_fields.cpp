#include "diffract/analysis/custom_fields.hpp"

#include <algorithm>
#include <mutex>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract::analysis {
namespace {

struct Registry {
    std::mutex mu;
    std::vector<CustomField> fields;
};

Registry& registry() {
    static Registry r;
    return r;
}

bool is_input(std::string_view name) {
    return std::find(std::begin(kCustomInputs), std::end(kCustomInputs), name) != std::end(kCustomInputs);
}

bool needs(const CustomField& f, std::string_view input) {
    return std::find(f.needs.begin(), f.needs.end(), input) != f.needs.end();
}

}  // namespace

void register_custom_field(CustomField field) {
    if (field.name.empty() || field.name.find(',') != std::string::npos)
        throw InputError(fmt::format("custom metric: invalid name '{}'", field.name));
    if (find_field(field.name))
        throw InputError(
            fmt::format("custom metric: '{}' is a built-in field (see `diffract metrics`)", field.name));
    for (const auto& in : field.needs)
        if (!is_input(in))
            throw InputError(
                fmt::format("custom metric '{}': unknown input '{}' (expected weights_svals, esd or weights)",
                            field.name, in));
    if (!field.compute) throw InputError(fmt::format("custom metric '{}': no function", field.name));
    auto& r = registry();
    std::lock_guard lock(r.mu);
    for (auto& f : r.fields)
        if (f.name == field.name) {
            f = std::move(field);
            return;
        }
    r.fields.push_back(std::move(field));
}

bool unregister_custom_field(const std::string& name) {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    const auto n = std::erase_if(r.fields, [&](const CustomField& f) { return f.name == name; });
    return n > 0;
}

std::vector<CustomField> custom_fields() {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    return r.fields;
}

std::vector<std::string> resolve_metrics_with_custom(std::string_view spec) {
    const auto registered = custom_fields();
    std::vector<std::string> custom;
    std::string builtin;
    std::size_t start = 0;
    bool any_builtin = false;
    while (start <= spec.size()) {
        const auto comma = spec.find(',', start);
        const auto name =
            spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        const bool is_custom = std::any_of(registered.begin(), registered.end(),
                                           [&](const CustomField& f) { return f.name == name; });
        if (is_custom) {
            if (std::find(custom.begin(), custom.end(), name) == custom.end()) custom.emplace_back(name);
        } else if (!name.empty()) {
            if (any_builtin) builtin += ',';
            builtin += name;
            any_builtin = true;
        }
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    auto out = resolve_metrics(any_builtin ? std::string_view(builtin) : std::string_view("default"));
    out.insert(out.end(), custom.begin(), custom.end());
    return out;
}

std::vector<CustomField> custom_fields_in(const std::vector<std::string>& metrics) {
    std::vector<CustomField> out;
    const auto registered = custom_fields();
    for (const auto& m : metrics)
        for (const auto& f : registered)
            if (f.name == m) out.push_back(f);
    return out;
}

namespace {
constexpr std::string_view kCustomSuffix = ";custom=";
}

std::string custom_field_config(const std::string& config, const CustomField& field) {
    return fmt::format("{}{}{}@{}", config, kCustomSuffix, field.name, field.version);
}

std::string analysis_config_of(const std::string& config) {
    return config.substr(0, config.find(kCustomSuffix));
}

CustomFieldComputer::CustomFieldComputer(const TensorInfo& tensor, const MatrixBlock& block,
                                         const FieldValues& values)
    : tensor_(tensor), block_(block) {
    static const std::vector<double> kNone;
    const auto it = values.vectors.find("weights_svals");
    svals_ = it == values.vectors.end() ? &kNone : &it->second;
}

double CustomFieldComputer::compute(const CustomField& f) {
    CustomFieldInputs in;
    in.rows = block_.logical_rows();
    in.cols = block_.logical_cols();
    if (needs(f, "weights_svals")) in.weights_svals = svals_;
    if (needs(f, "esd")) {
        if (!esd_) {
            // As the catalog's esd kernel: lambda_i = sigma_i^2 / N, N = max(rows, cols), ascending.
            const auto n = static_cast<double>(std::max(in.rows, in.cols));
            esd_.emplace();
            for (double s : *svals_) esd_->push_back(s * s / n);
            std::sort(esd_->begin(), esd_->end());
        }
        in.esd = &*esd_;
    }
    if (needs(f, "weights")) {
        if (!weights_) weights_ = read_matrix<double>(tensor_, block_);
        in.weights = &*weights_;
    }
    return f.compute(in);
}

}  // namespace diffract::analysis
