// bench_compare: compare's two routes on the same matrices, measured in the same run. For each shape
// a base W and a model W + 0.02·noise (bf16-free f32, in memory) are compared once on the
// whole-matrix route (--svd-route gesdd: two thin SVDs plus the delta's values) and once on the
// streamed Gram route (auto: four k × k products in slabs, then eigen-decompositions; falls back to
// the whole-matrix route when the vectors are not trusted, which the JSON reports).
// Prints one JSON object: per shape the seconds of each route, their ratio, whether auto fell back,
// and each route's working-memory estimate (what --max-memory admission reserves).
//   --shapes 8192x2048,32768x2048   (default: OLMo-2-1B MLP, a 1B-class embedding slice, attention)
//   --precision f32|f64             (the whole-matrix route's precision; the Gram route is f64)
//   --device cpu|cuda               (the backend; the JSON gives its measured f32 matmul rate)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "diffract/core/random.hpp"
#include "diffract/formats/memory_checkpoint.hpp"
#include "diffract/linalg/backend.hpp"
#include "diffract/run/compare.hpp"

using namespace diffract;
using Clock = std::chrono::steady_clock;

namespace {

formats::MemoryTensor tensor_of(const std::string& name, std::int64_t r, std::int64_t c,
                                std::shared_ptr<std::vector<float>> data) {
    formats::MemoryTensor t;
    t.name = name, t.dtype = DType::F32, t.shape = {r, c};
    t.data = reinterpret_cast<const std::byte*>(data->data());
    t.nbytes = data->size() * sizeof(float);
    t.owner = data;
    return t;
}

}  // namespace

int run_bench(int argc, char** argv) {
    std::string shapes_text = "8192x2048,32768x2048,2048x2048", precision = "f64", device = "cpu";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--shapes")) shapes_text = argv[i + 1];
        if (!std::strcmp(argv[i], "--precision")) precision = argv[i + 1];
        if (!std::strcmp(argv[i], "--device")) device = argv[i + 1];
    }
    const double matmul = linalg::make_backend(device)->measure_matmul_gflops(device == "cpu" ? 2048 : 8192);
    std::printf(
        "{\"device\": \"%s\", \"matmul_gflops\": %.1f, \"precision\": \"%s\", \"threads\": 1, \"shapes\": [",
        device.c_str(), matmul, precision.c_str());
    const auto store =
        std::filesystem::temp_directory_path() / ("bench_compare_" + std::to_string(getpid()) + ".sqlite");
    std::istringstream in(shapes_text);
    bool first = true;
    for (std::string shape; std::getline(in, shape, ',');) {
        const auto x = shape.find('x');
        const std::int64_t r = std::stoll(shape.substr(0, x)), c = std::stoll(shape.substr(x + 1));
        auto base = std::make_shared<std::vector<float>>(static_cast<std::size_t>(r * c));
        auto model = std::make_shared<std::vector<float>>(base->size());
        Rng rng(static_cast<std::uint64_t>(r * 31 + c));
        const double scale = 1.0 / std::sqrt(static_cast<double>(c));
        for (std::size_t i = 0; i < base->size(); ++i) {
            (*base)[i] = static_cast<float>(rng.normal() * scale);
            (*model)[i] = static_cast<float>((*base)[i] + 0.02 * rng.normal() * scale);
        }
        const std::string name = "model.layers.0.mlp.up_proj.weight";
        const formats::Checkpoint b(formats::memory_checkpoint("base", {tensor_of(name, r, c, base)}));
        const formats::Checkpoint m(formats::memory_checkpoint("model", {tensor_of(name, r, c, model)}));
        double seconds[2] = {0, 0};
        std::size_t fell_back = 0;
        for (int route = 0; route < 2; ++route) {
            run::CompareOptions o;
            o.base = b, o.models = {m};
            o.heads = false;
            o.route = route == 0 ? linalg::SvdRoute::gesdd : linalg::SvdRoute::auto_route;
            o.precision = precision == "f32" ? analysis::Precision::f32 : analysis::Precision::f64;
            o.run.threads = 1, o.run.progress = false, o.run.device = linalg::parse_device(device);
            o.run.store_path = store.string();
            std::filesystem::remove(store);  // nothing reused: every run computes
            const auto t = Clock::now();
            const auto result = run::compare(o);
            seconds[route] = std::chrono::duration<double>(Clock::now() - t).count();
            if (route == 1) fell_back = result.whole_route;
        }
        const auto k = static_cast<double>(std::min(r, c)), mm = static_cast<double>(std::max(r, c));
        const double s = precision == "f32" ? 4 : 8;
        const double whole_gb = (2 * s * mm * k + 16 * (mm + k) * k +
                                 s * (mm * k + (mm + k) * k + 4 * k * k) + 8 * ((mm + k) * k + k * k)) /
                                1e9;
        const double streamed_gb = 8 * (12 * k * k + 3 * std::min(mm * k, double(1 << 21))) / 1e9;
        std::printf(
            "%s{\"shape\": \"%s\", \"whole_route_s\": %.3f, \"gram_route_s\": %.3f, \"speedup\": %.2f, "
            "\"auto_fell_back\": %s, \"whole_route_gb\": %.2f, \"gram_route_gb\": %.2f}",
            first ? "" : ", ", shape.c_str(), seconds[0], seconds[1], seconds[0] / seconds[1],
            fell_back ? "true" : "false", whole_gb, streamed_gb);
        std::fflush(stdout);
        first = false;
    }
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(store.string() + suffix);
    std::printf("]}\n");
    return 0;
}

// One line on stderr and exit 2 for what the run refuses (no GPU for --device cuda, say).
int main(int argc, char** argv) {
    try {
        return run_bench(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_compare: %s\n", e.what());
        return 2;
    }
}
