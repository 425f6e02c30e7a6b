// Analyses one planted matrix through the installed C++ API and prints a few catalog fields, for the
// test to check against their closed forms: W = diag(4, 3, 2, 1) padded to 6 x 4.
#include <cstdio>

#include "diffract/analysis/catalog.hpp"
#include "diffract/linalg/backend.hpp"

int main() {
    diffract::Matrix<double> w(6, 4);
    for (int i = 0; i < 4; ++i) w(i, i) = 4.0 - i;
    auto backend = diffract::linalg::make_backend("cpu");
    const auto v = diffract::analysis::compute_fields(w, {"frob_norm", "stable_rank", "max_weights_sval"},
                                                      diffract::analysis::KernelConfig{}, *backend);
    std::printf("frob_norm %.17g\nstable_rank %.17g\nmax_weights_sval %.17g\n", v.scalars.at("frob_norm"),
                v.scalars.at("stable_rank"), v.scalars.at("max_weights_sval"));
    return 0;
}
