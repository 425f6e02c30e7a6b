// The CPU backend's block_singular_values (block_values.cpp), apart from the backend class so that
// the batching has a file of its own.
#pragma once

#include <span>
#include <vector>

#include "diffract/linalg/backend.hpp"

namespace diffract::linalg::cpu {

// `self` computes what the batches cannot: single blocks, the gesdd route, and the blocks whose
// Gram spectrum trips the auto route's guard.
std::vector<std::vector<double>> block_singular_values(Backend& self, const TensorInfo& t,
                                                       std::span<const MatrixBlock> blocks, bool f64,
                                                       SvdRoute route);

}  // namespace diffract::linalg::cpu
