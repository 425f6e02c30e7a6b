#include "diffract/store/content_id.hpp"

#include <xxhash.h>

#include <algorithm>
#include <map>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "diffract/core/parallel.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/store/store.hpp"

namespace diffract::store {
namespace {

// Hashed in slices so that a tensor's pages can be released as it is read: resident memory stays at
// one slice per thread however large the tensor.
constexpr std::size_t kSlice = std::size_t{64} << 20;

std::string hash_bytes(const TensorInfo& t) {
    XXH3_state_t* state = XXH3_createState();
    if (!state) throw std::bad_alloc();
    XXH3_128bits_reset(state);
    if (t.file->is_generated()) {
        // Computed bytes (a LoRA-merged tensor) are produced slice by slice and never held whole.
        std::vector<std::byte> slice(std::min(kSlice, t.nbytes));
        for (std::size_t off = 0; off < t.nbytes; off += kSlice) {
            const std::size_t n = std::min(kSlice, t.nbytes - off);
            t.file->copy_bytes(t.offset + off, std::span(slice.data(), n));
            XXH3_128bits_update(state, slice.data(), n);
        }
    }
    const auto bytes = t.file->is_generated() ? std::span<const std::byte>() : t.bytes();
    for (std::size_t off = 0; off < bytes.size(); off += kSlice) {
        const std::size_t n = std::min(kSlice, bytes.size() - off);
        t.file->will_need(t.offset + off, n);
        XXH3_128bits_update(state, bytes.data() + off, n);
        t.file->dont_need(t.offset + off, n);
    }
    const XXH128_hash_t h = XXH3_128bits_digest(state);
    XXH3_freeState(state);
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

std::string content_id(const TensorInfo& t, const std::string& byte_hash) {
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) shape += fmt::format("{}{}", i ? "x" : "", t.shape[i]);
    // A reordered view of the bytes is other content than the bytes in stored order.
    const auto layout = t.rope_head_rows > 0 ? fmt::format("/rope{}", t.rope_head_rows) : std::string();
    return fmt::format("{}/{}/{}{}", dtype_name(t.dtype), shape, byte_hash, layout);
}

}  // namespace

ContentIds content_ids(const std::vector<const TensorInfo*>& tensors, Store* cache, int threads,
                       bool progress) {
    std::vector<const TensorInfo*> unique = tensors;
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());

    ContentIds ids;
    std::vector<const TensorInfo*> to_hash;
    for (const auto* t : unique) {
        const auto& identity = t->file->identity();
        if (cache && identity)
            if (auto h = cache->cached_hash(*identity, t->offset, t->nbytes)) {
                ids[t] = content_id(*t, *h);
                continue;
            }
        to_hash.push_back(t);
    }
    std::vector<TaskCost> costs;
    for (const auto* t : to_hash) costs.push_back({static_cast<double>(t->nbytes), 0});
    std::vector<std::string> hashes(to_hash.size());
    Progress bar("hash", to_hash.size(), progress);
    run_tasks(costs, threads, 0, [&](std::size_t i) {
        hashes[i] = hash_bytes(*to_hash[i]);
        bar.advance();
    });
    bar.finish();
    for (std::size_t i = 0; i < to_hash.size(); ++i) {
        const auto* t = to_hash[i];
        if (cache && t->file->identity())
            cache->cache_hash(*t->file->identity(), t->offset, t->nbytes, hashes[i]);
        ids[t] = content_id(*t, hashes[i]);
    }
    return ids;
}

ContentIds identify_model(Store& db, const formats::Checkpoint& ck,
                          const std::vector<const TensorInfo*>& tensors, int threads, bool progress) {
    auto ids = content_ids(tensors, &db, threads, progress);
    std::map<std::string, TensorRecord> records;  // by tensor name: one row each, in name order
    for (const auto& [t, id] : ids) records[t->name] = {t->name, id, t->path(), t->file->identity()};
    std::vector<TensorRecord> rows;
    for (auto& [name, r] : records) rows.push_back(std::move(r));
    db.record_model(ck.name, ck.path, rows);
    return ids;
}

}  // namespace diffract::store
