// Spectrum transplant: the model's singular vectors with the base's singular values.
#include "diffract/edit/edit.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::edit {

EditSummary transplant(const std::string& out_dir, const formats::Checkpoint& base,
                       const formats::Checkpoint& model, const EditCommon& common) {
    auto backend = linalg::make_backend(common.device);
    return run_matrix_edit(out_dir, {"transplant", {}}, model, {&base}, common,
                           [&](const auto& in, const std::string&) {
                               const auto f = backend->svd(in[0]);
                               const auto s_base = backend->singular_values(in[1], linalg::SvdRoute::gesdd);
                               Matrix<double> out(in[0].rows, in[0].cols);
                               add_components(f, s_base, 0, out);
                               return out;
                           });
}

}  // namespace diffract::edit
