// bench_content_id CHECKPOINT [--threads N]: what the store's content identity costs on a real-sized
// model. Passes over every tensor, one run: a first read of every byte (from disk unless cached), a
// plain read from the page cache (a sum over the mapping: the bandwidth floor), the first content hash
// (XXH3-128 of every byte, the hashes written to a fresh store's cache) and a re-run on the unchanged files
// (cache hits only). Prints one JSON object with seconds, GB/s and the hash-to-read ratio.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "diffract/core/error.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/content_identity.hpp"
#include "diffract/store/store.hpp"

using namespace diffract;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2 && !(argc == 4 && std::strcmp(argv[2], "--threads") == 0)) {
        std::fprintf(stderr, "usage: bench_content_id CHECKPOINT [--threads N]\n");
        return 1;
    }
    const int threads = argc == 4 ? std::atoi(argv[3]) : 1;
    namespace fs = std::filesystem;
    const fs::path store_path =
        fs::temp_directory_path() / ("bench_content_id_" + std::to_string(getpid()) + ".sqlite");
    try {
        const auto ck = formats::open_checkpoint(argv[1]);
        std::vector<const TensorInfo*> tensors;
        double bytes = 0;
        for (const auto& t : ck.tensors) tensors.push_back(&t), bytes += static_cast<double>(t.nbytes);

        // The read baseline walks the mapping as the hash does (64 MiB slices, read-ahead hinted,
        // released after use); an untimed first pass brings the file into the page cache.
        std::uint64_t fold = 0;
        auto read_all = [&] {
            constexpr std::size_t kSlice = std::size_t{64} << 20;
            for (const auto* t : tensors) {
                const auto b = t->bytes();
                for (std::size_t off = 0; off < b.size(); off += kSlice) {
                    const std::size_t n = std::min(kSlice, b.size() - off);
                    t->file->will_need(t->offset + off, n);
                    std::size_t i = off;
                    for (; i + 8 <= off + n; i += 8) {
                        std::uint64_t w;
                        std::memcpy(&w, b.data() + i, 8);
                        fold += w;
                    }
                    for (; i < off + n; ++i) fold += static_cast<std::uint64_t>(b[i]);
                    t->file->dont_need(t->offset + off, n);
                }
            }
        };
        auto t0 = std::chrono::steady_clock::now();
        read_all();
        const double cold_s = seconds_since(t0);
        t0 = std::chrono::steady_clock::now();
        read_all();
        const double read_s = seconds_since(t0);

        double first_s = 0, rerun_s = 0;
        {
            store::Store db(store_path.string());
            t0 = std::chrono::steady_clock::now();
            const auto first = run::content_ids(tensors, &db, threads, false);
            first_s = seconds_since(t0);
            t0 = std::chrono::steady_clock::now();
            const auto again = run::content_ids(tensors, &db, threads, false);
            rerun_s = seconds_since(t0);
            if (first != again) throw std::runtime_error("content ids differ between runs");
        }
        std::error_code ec;
        for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(store_path.string() + suffix, ec);
        std::printf(
            "{\"tensors\": %zu, \"gb\": %.3f, \"threads\": %d, \"first_read_s\": %.3f, \"read_s\": %.3f, "
            "\"read_gb_per_s\": %.2f, "
            "\"hash_first_s\": %.3f, \"hash_gb_per_s\": %.2f, \"hash_over_read\": %.2f, \"rerun_s\": %.4f, "
            "\"fold\": %llu}\n",
            tensors.size(), bytes / 1e9, threads, cold_s, read_s, bytes / 1e9 / read_s, first_s,
            bytes / 1e9 / first_s, first_s / read_s, rerun_s, static_cast<unsigned long long>(fold & 0xff));
    } catch (const InputError& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    return 0;
}
