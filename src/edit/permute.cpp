// The paper's ablation: each matrix's singular values permuted among themselves.
#include <algorithm>
#include <cmath>
#include <span>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/random.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::edit {

EditSummary permute(const std::string& out_dir, const formats::Checkpoint& model, std::uint64_t seed,
                    const EditCommon& common) {
    auto backend = linalg::make_backend(common.device);
    return run_matrix_edit(out_dir, {"permute", {{"seed", seed}}}, model, {}, common,
                           [&](const auto& in, const std::string& unit) {
                               const auto f = backend->svd(in[0]);
                               auto s = f.s;
                               std::uint64_t state = stream_seed(seed, "permute", unit);
                               shuffle(std::span<double>(s), state);
                               Matrix<double> out(in[0].rows, in[0].cols);
                               add_components(f, s, 0, out);
                               return out;
                           });
}

}  // namespace diffract::edit
