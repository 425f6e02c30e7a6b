// Linear interpolation between two checkpoints; the endpoints copy an input's bytes.
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/formats/checkpoint_writer.hpp"

namespace diffract::edit {

EditSummary interpolate(const std::string& out_dir, const formats::Checkpoint& a,
                        const formats::Checkpoint& b, double omega, const EditCommon& common) {
    if (!std::isfinite(omega)) throw InputError(fmt::format("--omega: expected a number, found {}", omega));
    EditJob job;
    job.record = {"interpolate", {{"omega", omega}}};
    job.common = common;
    job.primary = omega == 1.0 ? &b : &a;
    job.aligned = {omega == 1.0 ? &a : &b};  // at the endpoints: only checked to match
    job.editable = omega == 0.0 || omega == 1.0 ? Editable::none : Editable::any_float;
    job.touches = inputs_differ;  // identical inputs combine to the primary itself
    job.edit = [&](const EditTensor& t, std::span<std::byte> out) {
        auto va = decode_masked(t, *t.tensor);
        const auto vb = decode_masked(t, *t.inputs[0]);
        for (std::size_t i = 0; i < va.size(); ++i) va[i] = (1 - omega) * va[i] + omega * vb[i];
        encode(va, t.tensor->dtype, out);
    };
    return run_edit(out_dir, job);
}

std::string omega_dir(double w) {
    return std::abs(w * 100 - std::round(w * 100)) < 1e-9 ? fmt::format("omega_{:.2f}", w)
                                                          : fmt::format("omega_{}", w);
}

std::vector<double> interpolate_grid(const std::string& out_dir, const formats::Checkpoint& a,
                                     const formats::Checkpoint& b, const std::string& grid,
                                     std::int64_t max_candidates, const EditCommon& common) {
    const auto omegas = parse_grid(grid, "--grid", check_max_candidates(max_candidates));
    check_free_space(out_dir, omegas.size() * checkpoint_bytes(a),
                     fmt::format("{} interpolated checkpoints", omegas.size()));
    formats::write_directory_atomically(out_dir, formats::input_paths({&a, &b}), [&](const std::string& tmp) {
        for (double w : omegas)
            interpolate((std::filesystem::path(tmp) / omega_dir(w)).string(), a, b, w, common);
    });
    return omegas;
}

}  // namespace diffract::edit
