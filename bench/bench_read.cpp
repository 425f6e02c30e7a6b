// bench_read CHECKPOINT: decodes every floating tensor of a checkpoint to f32 in slabs of 256 rows,
// dropping each tensor's pages after use, and prints the bytes read, the throughput and the peak
// resident memory — the check that reading a multi-GB model never holds it whole.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>

#include "diffract/core/error.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/formats/checkpoint.hpp"

using namespace diffract;

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: bench_read CHECKPOINT\n");
        return 1;
    }
    try {
        const auto start = std::chrono::steady_clock::now();
        const auto ck = formats::open_checkpoint(argv[1]);
        double bytes = 0, checksum = 0;
        std::size_t tensors = 0;
        for (const auto& t : ck.tensors) {
            if (!dtype_is_float(t.dtype) || ck.unsupported_types.count(t.name)) continue;
            const std::int64_t rows = stored_rows(t), cols = stored_cols(t);
            const std::size_t row_bytes =
                t.nbytes / static_cast<std::size_t>(std::max<std::int64_t>(rows, 1));
            for (std::int64_t r = 0; r < rows; r += 256) {
                const std::int64_t n = std::min<std::int64_t>(256, rows - r);
                const auto slab = read_matrix<float>(t, {r, n, 0, cols, false});
                // One entry per row keeps the decode observable; summing every entry was a serial
                // chain of dependent adds that took 92 % of the run (perf) and hid the reader's speed.
                for (std::int64_t i = 0; i < slab.rows; ++i) checksum += slab(i, i % cols);
                // Drop the slab's pages from this process as soon as they are decoded.
                t.file->dont_need(t.offset + static_cast<std::size_t>(r) * row_bytes,
                                  static_cast<std::size_t>(n) * row_bytes);
            }
            bytes += static_cast<double>(t.nbytes);
            ++tensors;
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        rusage ru{};
        getrusage(RUSAGE_SELF, &ru);
        std::printf(
            "{\"tensors\": %zu, \"gb_read\": %.3f, \"seconds\": %.2f, \"gb_per_s\": %.2f, \"peak_rss_mb\": "
            "%.1f, \"checksum\": %.6g}\n",
            tensors, bytes / 1e9, s, bytes / 1e9 / s, static_cast<double>(ru.ru_maxrss) / 1024.0, checksum);
    } catch (const InputError& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    return 0;
}
