#include "diffract/linalg/backend.hpp"

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract::linalg {

std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend();  // linalg/cuda, or the no_cuda stub

std::unique_ptr<Backend> make_backend(std::string_view device) {
    if (device == "cpu") return make_cpu_backend();
    if (device == "cuda") return make_cuda_backend();
    throw InputError(fmt::format("--device: unknown device '{}' (expected cpu or cuda)", device));
}

}  // namespace diffract::linalg
