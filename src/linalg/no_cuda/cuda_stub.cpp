// Compiled when the CUDA backend is not built: selecting it is a clear user error, and no
// #ifdef leaks into the code above the backend.
#include "diffract/core/error.hpp"
#include "diffract/linalg/backend.hpp"

namespace diffract::linalg {

bool cuda_backend_built() { return false; }

std::unique_ptr<Backend> make_cuda_backend() {
    throw InputError(
        "--device cuda: this diffract was built without CUDA (configure with -DDIFFRACT_CUDA=ON)");
}

}  // namespace diffract::linalg
