// The metric catalog: every field, with the reference library's name and formula, its level and
// its inputs; and the per-matrix engine that computes a requested set of PARAMETER-level fields.
//
// Fields are produced by kernels. A kernel declares the fields it needs and the fields it produces;
// asking for a field runs exactly the kernels it depends on, each once (the SVD of a matrix is
// computed once per run and precision, whatever asks for it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffract/core/field_values.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/names.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::analysis {

enum class Level { parameter, in_model, cross_model };
inline constexpr NameTable<Level, 3> kLevelNames{
    {{Level::parameter, "PARAMETER"}, {Level::in_model, "IN_MODEL"}, {Level::cross_model, "CROSS_MODEL"}}};
std::string_view level_name(Level l);

struct FieldInfo {
    std::string_view name;
    Level level;
    bool is_vector;  // per-component values (singular values, ESD, vectors): stored, not in CSVs
    std::string_view formula;
    std::string_view inputs;
    bool in_default = true;  // part of --metrics default
};

// Every field, in the order CSV columns use.
const std::vector<FieldInfo>& field_catalog();
const FieldInfo* find_field(std::string_view name);

// "default", "all", or a comma-separated list of PARAMETER-level scalar field names and IN_MODEL
// aggregates (aggregates.csv; selecting one computes the per-matrix field it aggregates, its
// FieldInfo::inputs). "default" and "all" list PARAMETER fields only (the aggregates are always
// written). Throws InputError naming an unknown field or a CROSS_MODEL / vector field.
std::vector<std::string> resolve_metrics(std::string_view spec);

enum class Precision { f32, f64 };
inline constexpr NameTable<Precision, 2> kPrecisionNames{{{Precision::f32, "f32"}, {Precision::f64, "f64"}}};

inline constexpr int kDefaultMinFitSize = 50;
inline constexpr int kDefaultPValueDraws = 100;

// The version that leads every analyze store key (KernelConfig::key): bumped when a kernel's results
// change, so results of an older version are never reused.
inline constexpr std::string_view kKernelConfigVersion = "v3";

// The most --alpha-ci bootstrap draws (per matrix) KernelConfig::check accepts.
inline constexpr int kMaxAlphaCiDraws = 10000;

struct KernelConfig {
    Precision precision = Precision::f64;
    linalg::SvdRoute route = linalg::SvdRoute::auto_route;
    std::int64_t rand_seed = 42;  // permutation null seed (-1: unseeded)
    double hard_rank_rtol = 1e-5;
    double tw_p = 0.005;
    // Bootstrap draws behind pl_p_value, tpl_p_value and expon_p_value (--p-value-draws): each draw
    // samples a data set from the fit and fits it again, so their cost is this many fits per matrix.
    int p_value_bootstraps = kDefaultPValueDraws;
    std::uint64_t p_value_seed = 0;
    // Fewest points a fit is trusted on: the tail for pl/tpl/expon, the bulk for MP. Below it the status
    // is too_few; a tail fit keeps its alpha/lambda/KS (shown flagged), its diagnostics and the MP fit's
    // fields are NaN (docs/metrics.md: why 50). 0 trusts every fit.
    int min_fit_size = kDefaultMinFitSize;
    // Bootstrap draws for pl_alpha_ci_low/high (0: off, the fields are NaN), and their seed.
    int alpha_ci_draws = 0;
    std::uint64_t alpha_ci_seed = 0;
    // Permutation-null draws behind the null fields (esd_rand_max/min, max/min_weights_rand_sval,
    // w1_rand_distance): with K > 1 each is the mean over K draws (draw d permuted with seed
    // rand_seed + d; draw 0 is the single draw of K = 1) and its *_null_std field the standard deviation
    // (ddof 1). The MP fit and the esd_rand vector use draw 0.
    int null_draws = 1;
    // A canonical string of every setting: results computed under another configuration are
    // never reused.
    std::string key() const;
    // Throws InputError naming the option (--min-fit-size, --null-draws, --alpha-ci, --p-value-draws)
    // for a value out of range: the one check both front ends go through.
    void check() const;
};

// One matrix to compute fields of: its shape; its entries, the caller's (`in_memory`), handed over
// (`entries`) or read on first use (only when a kernel needs them); and its singular values when
// they were computed already (values only, ascending, e.g. by Backend::block_singular_values for a
// tensor and its heads at once). The svd kernel then takes them as they are, so the values-only
// metrics never read the entries at all. Entries the computation owns (handed over or read) are
// permuted in place for the null once no later kernel reads them: one copy of a matrix, not two.
template <typename T>
struct MatrixInput {
    std::int64_t rows = 0, cols = 0;
    const Matrix<T>* in_memory = nullptr;
    std::optional<Matrix<T>> entries;
    std::function<Matrix<T>()> read;
    // The entries narrowed to f32, for a null the backend takes in f32 (linalg::null_in_f32) once the
    // f64 entries are released; without it the f64 entries are read and narrowed.
    std::function<Matrix<float>()> read_f32;
    std::optional<linalg::Spectrum> singular_values;
    // Called after each resampling draw (p-value bootstrap, alpha CI) from the computing thread: the
    // run layer's progress within a matrix (resampling_draws says how many to expect).
    std::function<void()> on_draw;
};

// The resampling draws computing `fields` of one matrix makes under `config` (the p-values' bootstrap
// and the alpha CI; fewer when a fit has too few points and its draws are skipped).
std::size_t resampling_draws(const std::vector<std::string>& fields, const KernelConfig& config);

// Computes the requested fields (and whatever they depend on) for one matrix.
template <typename T>
FieldValues compute_fields(MatrixInput<T> input, const std::vector<std::string>& fields,
                           const KernelConfig& config, linalg::Backend& backend);
template <typename T>
FieldValues compute_fields(const Matrix<T>& w, const std::vector<std::string>& fields,
                           const KernelConfig& config, linalg::Backend& backend);

// The precision of the arithmetic a unit's fields were computed in (Bookkeeping::precision_bits): the
// entries' (T) unless its singular values fell back to f64 (linalg::Spectrum: --precision f32 on a matrix
// its f32 routes cannot serve within their contract). Set on every result (compute_fields, the analyses)
// and written as the tables' `precision` column ("f32", "f64").
std::string_view precision_name(double bits);  // 32 → "f32", 64 → "f64", else "nan"

// The values of a matrix with `nonfinite` NaN/Inf entries, which is never factorised: every field
// that computing `fields` produces is NaN (vector fields empty), and Bookkeeping::nonfinite_count holds
// the count. Clean matrices carry a count of 0 (set by the analyses, not by compute_fields).
FieldValues nonfinite_field_values(const std::vector<std::string>& fields, std::int64_t nonfinite);

// Whether `fields` include singular vectors (then values computed in advance are not enough).
bool fields_need_vectors(const std::vector<std::string>& fields);

// The IN_MODEL aggregates over the whole-matrix rows of one model (NaN where undefined).
std::map<std::string, double> model_aggregates(const std::vector<FieldValues>& matrices);

// The kernels (by name) that computing `fields` runs, in order: for tests and `diffract metrics`.
std::vector<std::string> kernels_for(const std::vector<std::string>& fields);

// What computing `field` costs per matrix: one phrase per costly kernel it runs (the singular values, the
// permutation null, bootstrap refits), for `diffract metrics`. Empty for a field no kernel produces (an
// IN_MODEL aggregate: the cost of its input).
std::vector<std::string> field_cost(std::string_view field);

// The given fields and every stored field computed from them (for erasing results consistently).
std::vector<std::string> dependents_of(const std::vector<std::string>& fields);

}  // namespace diffract::analysis
