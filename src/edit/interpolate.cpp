// Linear interpolation between two checkpoints; the endpoints copy an input's bytes.
#include <cmath>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/edit/edit.hpp"

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
    job.edit = [&](const EditTensor& t, std::span<std::byte> out) {
        auto va = decode_masked(t, *t.tensor);
        const auto vb = decode_masked(t, *t.inputs[0]);
        for (std::size_t i = 0; i < va.size(); ++i) va[i] = (1 - omega) * va[i] + omega * vb[i];
        encode(va, t.tensor->dtype, out);
    };
    return run_edit(out_dir, job);
}

}  // namespace diffract::edit
