// The results store: an embedded SQLite database (default ./.diffract/results.sqlite) holding every
// computed field, keyed by the model's content fingerprint, the tensor, the block (whole matrix or
// one head's slice), the field and the kernel configuration. A re-run reuses what is there; a run
// killed at any point loses at most the matrices in flight (each matrix commits atomically).
// Several processes may share one store (WAL journal, busy timeout).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "diffract/analysis/catalog.hpp"

struct sqlite3;

namespace diffract::formats {
struct Checkpoint;
}

namespace diffract::store {

inline constexpr const char* kDefaultStorePath = ".diffract/results.sqlite";

struct ResultKey {
    std::int64_t model = 0;
    std::int64_t other = 0;  // cross-model results: the other (base) model; 0 otherwise
    std::string tensor;
    std::string block;  // "" for the whole matrix, "attn_q:3" for head 3's query block, ...
    std::string config;
};

struct ModelEntry {
    std::int64_t id = 0;
    std::string fingerprint, name, path;
    std::int64_t results = 0;
};

struct ResultRow {
    std::string model, other, tensor, block, field, config;
    std::optional<double> value;  // empty: NaN, or a vector field
    std::vector<double> vec;
};

class Store {
public:
    explicit Store(const std::string& path);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    const std::string& path() const { return path_; }

    // The id of the model with this fingerprint, registering it if new.
    std::int64_t model_id(const std::string& fingerprint, const std::string& name, const std::string& path);

    // The stored values of `fields` for `key`, or nullopt unless every one is present.
    std::optional<analysis::FieldValues> get(const ResultKey& key, const std::vector<std::string>& fields);
    // Stores every value (scalars and the vectors named in `vector_fields`) in one transaction.
    void put(const ResultKey& key, const analysis::FieldValues& values,
             const std::vector<std::string>& vector_fields);

    std::vector<ModelEntry> models();
    std::map<std::string, std::int64_t> field_counts();
    // Erases a model (by name or fingerprint prefix) with every result about it. Returns rows erased.
    std::int64_t erase_model(const std::string& name_or_fingerprint);
    // Erases a field, and every field computed from it, for all models (or one). Returns rows erased.
    std::int64_t erase_fields(const std::vector<std::string>& fields, const std::string& model = "");
    // Copies another store's models and results into this one (existing rows kept).
    std::int64_t merge_from(const std::string& other_path);
    void for_each_result(const std::function<void(const ResultRow&)>& visit);

private:
    void exec(const char* sql);
    std::string path_;
    sqlite3* db_ = nullptr;
    std::recursive_mutex mu_;  // one connection, used by every worker thread
};

// A content fingerprint of a checkpoint: tensor names, dtypes, shapes, and 64 bytes sampled at every
// MiB of every tensor's data (plus its last 64 bytes). Reads ~1/16000 of the data.
std::string fingerprint(const formats::Checkpoint& ck);

}  // namespace diffract::store
