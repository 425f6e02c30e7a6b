// Model merging as mergekit's generalized task arithmetic: task_arithmetic, ties, dare_linear, dare_ties.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/random.hpp"
#include "diffract/edit/edit.hpp"

namespace diffract::edit {

MergeMethod parse_merge_method(const std::string& text) {
    if (const auto m = value_of(kMergeMethodNames, text)) return *m;
    throw InputError(fmt::format("--method: expected {}, found '{}'", choice_list(kMergeMethodNames), text));
}

namespace {

// Keeps the k = int(density · n) largest |δ| (mergekit's "magnitude"); the rest becomes 0.
void trim_magnitude(std::vector<double>& d, double density) {
    const auto k = static_cast<std::size_t>(density * static_cast<double>(d.size()));
    if (k >= d.size()) return;
    std::vector<std::size_t> idx(d.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                     [&](std::size_t a, std::size_t b) { return std::abs(d[a]) > std::abs(d[b]); });
    for (std::size_t i = k; i < idx.size(); ++i) d[idx[i]] = 0;
}

// Keeps each δ with probability `density`, rescaled by 1 / density (DARE, mergekit's "random").
void drop_and_rescale(std::vector<double>& d, double density, std::uint64_t seed) {
    Rng rng(seed);
    for (auto& x : d) x = rng.uniform() < density ? x / density : 0.0;
}

double sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }

}  // namespace

EditSummary merge(const std::string& out_dir, const formats::Checkpoint& base,
                  const std::vector<const formats::Checkpoint*>& models, const MergeOptions& o,
                  const EditCommon& common) {
    if (models.empty()) throw InputError("--models: at least one model to merge");
    std::vector<double> weights = o.weights.empty() ? std::vector<double>(models.size(), 1.0) : o.weights;
    if (weights.size() != models.size())
        throw InputError(fmt::format("--weights: expected {} weights (one per model), found {}",
                                     models.size(), weights.size()));
    for (double w : weights)
        if (!std::isfinite(w))
            throw InputError(fmt::format("--weights: expected finite weights, found {}", w));
    if (!std::isfinite(o.lambda))
        throw InputError(fmt::format("--lambda: expected a finite scale, found {}", o.lambda));
    if (!std::isfinite(o.density))
        throw InputError(fmt::format("--density: expected a value in (0, 1], found {}", o.density));
    const bool sparse = o.method != MergeMethod::task_arithmetic;
    if (sparse && !(o.density > 0 && o.density <= 1))
        throw InputError(fmt::format("--density: expected a value in (0, 1], found {}", o.density));
    const bool consensus = o.method == MergeMethod::ties || o.method == MergeMethod::dare_ties;
    const bool dare = o.method == MergeMethod::dare_linear || o.method == MergeMethod::dare_ties;
    const bool normalize = o.normalize == MergeOptions::Normalize::method_default
                               ? o.method == MergeMethod::ties
                               : o.normalize == MergeOptions::Normalize::on;

    EditJob job;
    job.record = {"merge",
                  {{"method", std::string(name_of(kMergeMethodNames, o.method))},
                   {"weights", weights},
                   {"density", o.density},
                   {"lambda", o.lambda},
                   {"normalize", normalize},
                   {"seed", o.seed}}};
    job.primary = &base;
    job.aligned = models;
    job.editable = Editable::any_float;
    job.common = common;
    job.touches = inputs_differ;  // identical inputs combine to the primary itself
    job.edit = [&](const EditTensor& t, std::span<std::byte> out) {
        const auto w0 = decode_masked(t, *t.tensor);
        const std::size_t n = w0.size();
        std::vector<std::vector<double>> deltas;  // wᵢ · sparsify(Mᵢ − base)
        for (std::size_t m = 0; m < models.size(); ++m) {
            auto d = decode_masked(t, *t.inputs[m]);
            for (std::size_t i = 0; i < n; ++i) d[i] -= w0[i];
            if (o.method == MergeMethod::ties) trim_magnitude(d, o.density);
            if (dare) drop_and_rescale(d, o.density, stream_seed(o.seed, t.tensor->name, std::to_string(m)));
            for (auto& x : d) x *= weights[m];
            deltas.push_back(std::move(d));
        }
        std::vector<double> result(n);
        for (std::size_t i = 0; i < n; ++i) {
            double majority = 1;
            if (consensus) {
                double sum = 0;
                for (const auto& d : deltas) sum += d[i];
                majority = sum >= 0 ? 1.0 : -1.0;
            }
            double mixed = 0, divisor = 0;
            for (std::size_t m = 0; m < deltas.size(); ++m) {
                if (consensus && sign(deltas[m][i]) != majority) continue;
                mixed += deltas[m][i];
                divisor += weights[m];
            }
            if (normalize) mixed /= std::abs(divisor) < 1e-8 ? 1.0 : divisor;
            result[i] = w0[i] + o.lambda * mixed;
        }
        encode(result, t.tensor->dtype, out);
    };
    return run_edit(out_dir, job);
}

}  // namespace diffract::edit
