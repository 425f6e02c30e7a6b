// The results store: an embedded SQLite database (default ./.diffract/results.sqlite) holding every
// computed field, keyed by the content of the bytes it was computed from: the tensor's content id
// (XXH3-128 of its dtype, shape and every byte, computed by run/content_identity.hpp), for
// cross-model results the other tensor's too, the block (whole matrix, or one head's slice and its
// region) and the kernel configuration. A result is reused only for the very bytes it was computed from, so
// editing one tensor of a checkpoint recomputes that tensor and reuses the rest.
//
// Names are not identity: each run records which tensor contents the names of its inputs hold
// (model_tensors), so one checkpoint may carry several names and a name always shows its latest run.
// A re-run reuses what is there; a run killed at any point loses at most the matrices in flight
// (each matrix commits atomically). Several processes may share one store (WAL journal, busy timeout).
// The schema carries a version (PRAGMA user_version): a store of another version is refused.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "diffract/core/field_values.hpp"
#include "diffract/core/mapped_file.hpp"

struct sqlite3;

namespace diffract::store {

inline constexpr const char* kDefaultStorePath = ".diffract/results.sqlite";
// `path` as given (--store), or the default store when it is empty.
inline std::string store_path_or_default(const std::string& path) {
    return path.empty() ? kDefaultStorePath : path;
}
// Version 1 keyed results by a sampled fingerprint of the whole model (64 bytes a MiB): its results
// cannot be trusted for the bytes they claim, so it is refused, not migrated.
inline constexpr int kSchemaVersion = 2;

enum class StoreMode {
    read_write,  // created if missing
    read_only,   // list and export; works on a read-only medium
};

struct ResultKey {
    std::string content;  // the tensor's content id
    std::string other;    // cross-model results: the other (base) tensor's content id; "" otherwise
    std::string block;    // "" for the whole matrix; "attn_q:3@<region>" for a head block (store_block)
    std::string config;
};

// A tensor of a model as one run saw it: its content id, and the file identity it was hashed under
// (a row from an earlier run stays valid only while its file keeps that identity).
struct TensorRecord {
    std::string tensor;
    std::string content;
    std::string file;
    std::optional<FileIdentity> identity;
};

struct ModelEntry {
    std::string name, path;
    std::int64_t tensors = 0;
    std::int64_t results = 0;  // of its tensors' contents: its own analyses and its comparisons to bases
};

struct ResultRow {
    std::string model, other, tensor, block, field, config;
    std::optional<double> value;  // empty: NaN, or a vector field
    std::vector<double> vec;
};

class Store {
public:
    // Opens (read_write: creates) the store. Throws InputError naming the path for a file that is not
    // a diffract store, a store of another schema version, or a store that cannot be opened.
    explicit Store(const std::string& path, StoreMode mode = StoreMode::read_write);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    const std::string& path() const { return path_; }
    // Opened for writing on a read-only file system (a store shipped on a read-only mount): it serves
    // its results; the bookkeeping writes (models, pairs, hash cache) are skipped, and a job that would
    // have to put a result refuses before computing it (run/job.cpp).
    bool read_only_medium() const { return read_only_medium_; }

    // Records that the model called `name` (at `path`) holds `tensors` in this run. The name's rows of
    // earlier runs are dropped unless the same file still has the identity it had then.
    void record_model(const std::string& name, const std::string& path,
                      const std::vector<TensorRecord>& tensors);
    // Records that the model called `name` was compared with the base called `base`.
    void record_pair(const std::string& name, const std::string& base);

    // The stored values of `fields` for `key`, or nullopt unless every one is present.
    std::optional<FieldValues> get(const ResultKey& key, const std::vector<std::string>& fields);
    // Stores every value (scalars, the vectors named in `vector_fields`, and the bookkeeping under its
    // stored names) in one transaction; `get` reads those names back into FieldValues::bookkeeping.
    void put(const ResultKey& key, const FieldValues& values, const std::vector<std::string>& vector_fields);

    // The cached content hash of `length` bytes at `offset` of the file with identity `file`.
    std::optional<std::string> cached_hash(const FileIdentity& file, std::uint64_t offset,
                                           std::uint64_t length);
    void cache_hash(const FileIdentity& file, std::uint64_t offset, std::uint64_t length,
                    const std::string& hash);

    std::vector<ModelEntry> models();
    // Every path the store has recorded as an input (the models' paths and their tensors' files): an
    // output never replaces or sits inside one of them, whichever command read it.
    std::vector<std::string> input_paths();
    std::map<std::string, std::int64_t> field_counts();
    // Erases the model called exactly `name`, the results of the contents no other name holds, and the
    // comparisons no recorded pair reaches any more. Returns results erased. Throws InputError when no model
    // has that name.
    std::int64_t erase_model(const std::string& name);
    // Erases exactly `fields` (the caller adds every field computed from them: analysis::dependents_of)
    // for all models, or for the contents of the model called exactly `model`, which other names holding
    // the same bytes share. Returns rows erased.
    std::int64_t erase_fields(const std::vector<std::string>& fields, const std::string& model = "");
    // Copies another store's models and results into this one (existing rows kept). Refuses a file
    // that is not a store of this schema, this store itself, and a name that holds other tensor
    // contents in the two stores.
    // The other store is read whole first (SQLite's integrity_check), so that a damaged one is named as
    // such and this store is never blamed for it.
    std::int64_t merge_from(const std::string& other_path);
    // Every result under every name that holds its content (cross-model results under every recorded
    // pair), as (model, other, tensor, block, field, config, value).
    void for_each_result(const std::function<void(const ResultRow&)>& visit);

private:
    void exec(const char* sql);
    void check_schema(StoreMode mode);
    // Throws InputError naming this store when SQLite finds it damaged.
    void check_intact();
    std::string path_;
    sqlite3* db_ = nullptr;
    std::recursive_mutex mu_;  // one connection, used by every worker thread
    bool read_only_medium_ = false;
};

// The block as shown in outputs: the store's block key without its region ("attn_q:3").
std::string display_block(const std::string& store_block);

}  // namespace diffract::store
