// Truncation of the CPT delta to its best rank-k approximation.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::edit {

int TruncateRule::k_for(const std::vector<double>& s) const {
    const auto n = static_cast<int>(s.size());
    switch (kind) {
        case Kind::keep:
            return std::clamp(static_cast<int>(std::ceil(value * n - 1e-9)), 0, n);
        case Kind::rank:
            return std::clamp(static_cast<int>(value), 0, n);
        case Kind::energy: {
            double total = 0;
            for (double x : s) total += x * x;
            if (total == 0 || value <= 0) return 0;  // E = 0: the smallest k is 0
            double acc = 0;
            for (int k = 1; k <= n; ++k) {
                const double x = s[static_cast<std::size_t>(n - k)];
                acc += x * x;
                if (acc >= value * total * (1 - 1e-12)) return k;
            }
            return n;
        }
    }
    return n;
}

TruncateRule truncate_rule(std::optional<double> keep, std::optional<int> rank,
                           std::optional<double> energy) {
    if (keep.has_value() + rank.has_value() + energy.has_value() != 1)
        throw InputError("edit truncate: give exactly one of --keep, --rank and --energy");
    if (keep) return {TruncateRule::Kind::keep, *keep};
    if (rank) return {TruncateRule::Kind::rank, static_cast<double>(*rank)};
    return {TruncateRule::Kind::energy, *energy};
}

EditSummary truncate(const std::string& out_dir, const formats::Checkpoint& base,
                     const formats::Checkpoint& model, const TruncateRule& rule, const EditCommon& common) {
    if ((rule.kind != TruncateRule::Kind::rank && !(rule.value >= 0 && rule.value <= 1)) ||
        !(rule.value >= 0 && std::isfinite(rule.value)))
        throw InputError(
            fmt::format("truncate: expected a fraction in [0, 1] (or a rank >= 0), found {}", rule.value));
    auto backend = linalg::make_backend(common.device);
    const char* kinds[] = {"keep", "rank", "energy"};
    const nlohmann::json parameters{{kinds[static_cast<int>(rule.kind)], rule.value}};
    return run_matrix_edit(out_dir, {"truncate", parameters}, model, {&base}, common,
                           [&](const auto& in, const std::string&) {
                               const auto& w = in[0];
                               Matrix<double> out = in[1];  // the base
                               Matrix<double> delta(w.rows, w.cols);
                               for (std::size_t i = 0; i < w.data.size(); ++i)
                                   delta.data[i] = w.data[i] - out.data[i];
                               const auto f = backend->svd(delta);
                               const int k = rule.k_for(f.s);
                               add_components(f, f.s, f.s.size() - static_cast<std::size_t>(k), out);
                               return out;
                           });
}

}  // namespace diffract::edit
