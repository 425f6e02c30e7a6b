// Compiled with the CUDA backend: check_device accepts "cuda".
namespace diffract::linalg {

bool cuda_backend_built() { return true; }

}  // namespace diffract::linalg
