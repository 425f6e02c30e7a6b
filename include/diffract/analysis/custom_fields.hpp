// User-defined fields (custom metrics): a named per-matrix scalar computed from inputs the engine
// already has — the singular values (weights_svals, ascending), the ESD (esd, lambda_i = sigma_i^2 / N)
// and the matrix itself (weights, logical out x in, f64) — by a callback. `analyze` computes every
// registered field named in AnalyzeOptions::metrics for each matrix and head block, in the task that
// computes the unit's built-in fields (on the job's threads, under its memory budget: a callback may
// run on any worker thread, several at once), and the run layer keeps it in the store under the
// matrix's result key, with the field's version in the configuration string (a changed function, given
// a new version, is recomputed alone, never mixed up). A field becomes a metrics.csv column like any
// other, after the catalog's columns.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/analysis/catalog.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/tensor.hpp"

namespace diffract::analysis {

// The inputs a custom field may declare.
inline constexpr std::string_view kCustomInputs[] = {"weights_svals", "esd", "weights"};

struct CustomFieldInputs {
    std::int64_t rows = 0, cols = 0;                     // logical shape
    const std::vector<double>* weights_svals = nullptr;  // set when declared
    const std::vector<double>* esd = nullptr;
    const Matrix<double>* weights = nullptr;
};

struct CustomField {
    std::string name;
    std::vector<std::string> needs;                           // among kCustomInputs
    std::string version;                                      // part of the stored configuration
    std::function<double(const CustomFieldInputs&)> compute;  // may be called from any worker thread
};

// Registers (or replaces) a field. Throws InputError when the name is empty, contains ',' or names a
// catalog field, or when an input is not one of kCustomInputs.
void register_custom_field(CustomField field);
// Returns whether a field of that name was registered.
bool unregister_custom_field(const std::string& name);
// The registered fields, in registration order.
std::vector<CustomField> custom_fields();

// resolve_metrics over a --metrics spec that may also name registered custom fields: the catalog part
// resolves as resolve_metrics does (same errors; "default" when only custom fields are named) and the
// custom names follow, in the order given.
std::vector<std::string> resolve_metrics_with_custom(std::string_view spec);

// The registered fields among `metrics`, in that order (a snapshot: later registrations do not matter).
std::vector<CustomField> custom_fields_in(const std::vector<std::string>& metrics);

// The store configuration string of one custom field under the analysis configuration `config`.
std::string custom_field_config(const std::string& config, const CustomField& field);
// The analysis configuration a stored configuration belongs to: `config` itself, or the one a custom
// field's configuration (custom_field_config) was made from.
std::string analysis_config_of(const std::string& config);

// The custom fields of one matrix (tensor block) whose built-in fields are `values` (with the
// weights_svals vector): the ESD and the entries are formed once, on the first field that declares them.
// The run layer keeps each value in the store under the field's own configuration (custom_field_config).
class CustomFieldComputer {
public:
    CustomFieldComputer(const TensorInfo& tensor, const MatrixBlock& block, const FieldValues& values);
    double compute(const CustomField& field);

private:
    const TensorInfo& tensor_;
    const MatrixBlock& block_;
    const std::vector<double>* svals_;
    std::optional<std::vector<double>> esd_;
    std::optional<Matrix<double>> weights_;
};

}  // namespace diffract::analysis
