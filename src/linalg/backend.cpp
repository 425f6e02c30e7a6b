#include "diffract/linalg/backend.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/linalg/gram_pair.hpp"

namespace diffract::linalg {

std::unique_ptr<GramProducts> Backend::f32_gram_products(std::int64_t, std::int64_t, bool) { return nullptr; }

std::vector<double> Backend::gram(std::span<const double> a, bool transpose, std::int64_t n,
                                  std::int64_t depth) {
    return multiply(a, transpose, a, !transpose, n, n, depth);
}

std::vector<double> Backend::top_symmetric_eigen(std::span<double> a, std::int64_t n, std::int64_t count,
                                                 std::vector<double>& vectors) {
    count = std::clamp<std::int64_t>(count, 0, n);
    auto lambda = symmetric_eigen(a, n, true);  // ascending; `a` now holds the eigenvectors
    const auto first = static_cast<std::size_t>(n - count);
    vectors.assign(a.begin() + static_cast<std::ptrdiff_t>(first * static_cast<std::size_t>(n)),
                   a.begin() + static_cast<std::ptrdiff_t>(n * n));
    return {lambda.begin() + static_cast<std::ptrdiff_t>(first), lambda.end()};
}

std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend();  // linalg/cuda, or the no_cuda stub

std::unique_ptr<Backend> make_backend(Device device) {
    return device == Device::cuda ? make_cuda_backend() : make_cpu_backend();
}

std::unique_ptr<Backend> make_backend(std::string_view device) { return make_backend(parse_device(device)); }

bool cuda_backend_built();  // linalg/cuda: true; linalg/no_cuda: false

Device parse_device(std::string_view text) {
    const auto device = value_of(kDeviceNames, text);
    if (!device)
        throw InputError(
            fmt::format("--device: unknown device '{}' (expected {})", text, choice_list(kDeviceNames)));
    if (*device == Device::cuda && !cuda_backend_built()) (void)make_cuda_backend();  // the stub throws
    return *device;
}

std::vector<std::vector<double>> block_singular_values_one_by_one(Backend& backend, const TensorInfo& t,
                                                                  std::span<const MatrixBlock> blocks,
                                                                  bool f64, SvdRoute route) {
    std::vector<std::vector<double>> out;
    for (const auto& b : blocks)
        out.push_back(f64 ? backend.singular_values(read_matrix<double>(t, b), route)
                          : backend.singular_values(read_matrix<float>(t, b), route));
    return out;
}

std::vector<Spectrum> Backend::f32_block_spectra(const TensorInfo& t, std::span<const MatrixBlock> blocks,
                                                 SvdRoute route) {
    std::vector<Spectrum> out;
    for (auto& s : block_singular_values(t, blocks, false, route)) out.push_back({std::move(s)});
    return out;
}

std::vector<Spectrum> block_spectra_one_by_one(Backend& backend, const TensorInfo& t,
                                               std::span<const MatrixBlock> blocks, SvdRoute route) {
    std::vector<Spectrum> out;
    for (const auto& b : blocks) out.push_back(backend.f32_spectrum(read_matrix<float>(t, b), route));
    return out;
}

Matrix<double> read_widened(const TensorInfo& t, const MatrixBlock& block, bool f64) {
    // Every stored dtype but f64 decodes to values exact in f32 (GGUF block types dequantise through f32), so
    // reading them as f64 directly gives the same numbers in one pass.
    if (f64 || t.dtype != DType::F64) return read_matrix<double>(t, block);
    const auto narrow = read_matrix<float>(t, block);
    Matrix<double> out(narrow.rows, narrow.cols);
    std::copy(narrow.data.begin(), narrow.data.end(), out.data.begin());
    return out;
}

}  // namespace diffract::linalg
