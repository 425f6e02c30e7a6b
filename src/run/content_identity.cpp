#include "diffract/run/content_identity.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "diffract/core/busy_threads.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/mapped_file.hpp"
#include "diffract/core/progress.hpp"
#include "diffract/core/quantized.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/run/scheduler.hpp"
#include "diffract/store/store.hpp"

namespace diffract::run {
namespace {

// Hashed in slices so that a tensor's pages can be released as it is read: resident memory stays at
// one slice per thread however large the tensor.
constexpr std::size_t kSlice = std::size_t{64} << 20;

std::string hash_bytes(const TensorInfo& t) {
    const BusyScope reading;
    XXH3_state_t* state = XXH3_createState();
    if (!state) throw std::bad_alloc();
    XXH3_128bits_reset(state);
    const auto bytes = t.bytes();
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

// Marks the id of a LoRA-merged tensor, and the version of the merge that computes its bytes
// (formats/lora_adapter.cpp): a change to the merge's arithmetic must change this.
constexpr const char* kMergedPrefix = "lora-merge-v1:";

std::string content_id(const TensorInfo& t, const std::string& byte_hash) {
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) shape += fmt::format("{}{}", i ? "x" : "", t.shape[i]);
    // A reordered view of the bytes is other content than the bytes in stored order.
    const auto layout = t.rope_head_rows > 0 ? fmt::format("/rope{}", t.rope_head_rows) : std::string();
    return fmt::format("{}/{}/{}{}", dtype_name(t.dtype), shape, byte_hash, layout);
}

std::string merged_id(const TensorInfo& t, const std::string& base, const std::string& b,
                      const std::string& a) {
    const auto& u = *t.low_rank;
    const auto recipe = fmt::format("{}+{:a}*{}*{}{}", base, u.scale, b, a, u.transposed ? "/T" : "");
    const XXH128_hash_t h = XXH3_128bits(recipe.data(), recipe.size());
    return content_id(t, fmt::format("{}{:016x}{:016x}", kMergedPrefix, h.high64, h.low64));
}

// Marks the id of a matrix decoded from a quantized layout (core/quantized.hpp), and the version of
// the decoders: a change to their arithmetic must change this.
constexpr const char* kQuantizedPrefix = "quantized-v1:";

// What the decoded values depend on: the scheme and its parameters, and each stored part's id.
std::string quantized_id(const TensorInfo& t, const std::vector<std::string>& part_ids) {
    const auto& q = *t.quant;
    auto recipe = fmt::format("{}|{}|{}x{}|b{}|{}x{}|{}/{}|{:a}|z{}|r{}+{}|s{}+{}+{}",
                              quant_scheme_name(q.scheme), q.description, q.rows, q.cols, q.bits,
                              q.block_rows, q.block_cols, q.blocksize, q.nested_blocksize, q.nested_offset,
                              q.zero_minus_one, q.row_first, q.row_step, q.first, q.row_stride, q.col_stride);
    for (const auto& id : part_ids) recipe += "|" + id;
    const XXH128_hash_t h = XXH3_128bits(recipe.data(), recipe.size());
    return content_id(t, fmt::format("{}{:016x}{:016x}", kQuantizedPrefix, h.high64, h.low64));
}

}  // namespace

std::string content_id_now(const TensorInfo& t) {
    if (t.quant) {
        std::vector<std::string> ids;
        for (const auto* part : t.quant->parts()) ids.push_back(content_id_now(*part));
        return quantized_id(t, ids);
    }
    if (!t.low_rank) return content_id(t, hash_bytes(t));
    const auto& u = *t.low_rank;
    return merged_id(t, content_id_now(u.base), content_id_now(u.b), content_id_now(u.a));
}

void check_unchanged(const TensorInfo& t, const std::string& id) {
    if (content_id_now(t) != id)
        throw_input_error(t.path(), t.name,
                          "the tensor changed while being read (its bytes no longer hash to the content id "
                          "taken when the run started: the file was rewritten in place); nothing computed "
                          "from it was stored");
}

ContentIds content_ids(const std::vector<const TensorInfo*>& tensors, store::Store* cache, int threads,
                       bool progress) {
    // A file's stat is no proof of its bytes: writes through a shared mapping can leave size, mtime and
    // ctime as they were (tmpfs always, ext4 on a dirty page). Hashes are cached in the store, and read
    // back, only when DIFFRACT_REUSE_FILE_HASHES=1 says the files are never written that way (without it
    // a cache nobody reads would cost a store write per tensor on every run).
    static const bool reuse_file_hashes = [] {
        const char* v = std::getenv("DIFFRACT_REUSE_FILE_HASHES");
        return v && std::string_view(v) == "1";
    }();
    // A LoRA-merged tensor is identified by what its bytes are computed from (see the header): its
    // base tensor and factors are hashed instead of it.
    // A quantized matrix likewise by its stored parts.
    std::vector<const TensorInfo*> unique, merged, quantized;
    for (const auto* t : tensors) {
        if (t->low_rank) merged.push_back(t);
        if (t->quant) quantized.push_back(t);
        const auto parts = stored_parts(*t);
        unique.insert(unique.end(), parts.begin(), parts.end());
    }
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());

    ContentIds ids;
    std::vector<const TensorInfo*> to_hash;
    for (const auto* t : unique) {
        const auto& identity = t->file->identity();
        if (cache && reuse_file_hashes && identity)
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
        if (cache && reuse_file_hashes && t->file->identity())
            cache->cache_hash(*t->file->identity(), t->offset, t->nbytes, hashes[i]);
        ids[t] = content_id(*t, hashes[i]);
    }
    for (const auto* t : merged)
        ids[t] = merged_id(*t, ids.at(&t->low_rank->base), ids.at(&t->low_rank->b), ids.at(&t->low_rank->a));
    for (const auto* t : quantized) {
        std::vector<std::string> part_ids;
        for (const auto* part : t->quant->parts()) part_ids.push_back(ids.at(part));
        ids[t] = quantized_id(*t, part_ids);
    }
    // A file truncated while it was hashed was read as zeros (core/mapped_file.hpp): no id of it is
    // recorded.
    check_mapped_inputs_intact();
    // Only the tensors asked for: a merged tensor's base and factors were hashed for its id, and
    // identify_model must not record them as the model's (the base shares the merged tensor's name).
    ContentIds asked;
    for (const auto* t : tensors) asked[t] = ids.at(t);
    return asked;
}

ContentIds identify_model(store::Store& db, const formats::Checkpoint& ck,
                          const std::vector<const TensorInfo*>& tensors, int threads, bool progress) {
    auto ids = content_ids(tensors, &db, threads, progress);
    std::map<std::string, store::TensorRecord> records;  // by tensor name: one row each, in name order
    for (const auto& [t, id] : ids) records[t->name] = {t->name, id, t->path(), t->file->identity()};
    std::vector<store::TensorRecord> rows;
    for (auto& [name, r] : records) rows.push_back(std::move(r));
    db.record_model(ck.name, ck.source(), rows);
    return ids;
}

}  // namespace diffract::run
