// Compiled with the CUDA backend: parse_device accepts "cuda".
namespace diffract::linalg {

bool cuda_backend_built() { return true; }

}  // namespace diffract::linalg
