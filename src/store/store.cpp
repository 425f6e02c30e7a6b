#include "diffract/store/store.hpp"

#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/formats/checkpoint.hpp"

namespace fs = std::filesystem;

namespace diffract::store {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS models(
  id INTEGER PRIMARY KEY,
  fingerprint TEXT UNIQUE NOT NULL,
  name TEXT NOT NULL,
  path TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results(
  model INTEGER NOT NULL,
  other INTEGER NOT NULL,
  tensor TEXT NOT NULL,
  block TEXT NOT NULL,
  field TEXT NOT NULL,
  config TEXT NOT NULL,
  value REAL,
  vec BLOB,
  PRIMARY KEY(model, other, tensor, block, config, field)) WITHOUT ROWID;
)sql";

// A prepared statement that finalizes itself.
class Statement {
public:
    Statement(sqlite3* db, const char* sql) : db_(db) {
        if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK)
            throw std::runtime_error(fmt::format("sqlite prepare failed: {} ({})", sqlite3_errmsg(db), sql));
    }
    ~Statement() { sqlite3_finalize(st_); }
    Statement& bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(st_, i, v)); }
    Statement& bind(int i, const std::string& v) {
        return check(sqlite3_bind_text(st_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    Statement& bind(int i, double v) {
        return check(std::isnan(v) ? sqlite3_bind_null(st_, i) : sqlite3_bind_double(st_, i, v));
    }
    Statement& bind_null(int i) { return check(sqlite3_bind_null(st_, i)); }
    Statement& bind_blob(int i, const std::vector<double>& v) {
        return check(sqlite3_bind_blob(st_, i, v.data(), static_cast<int>(v.size() * sizeof(double)),
                                       SQLITE_TRANSIENT));
    }
    bool step() {
        const int rc = sqlite3_step(st_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw std::runtime_error(fmt::format("sqlite step failed: {}", sqlite3_errmsg(db_)));
    }
    void reset() {
        sqlite3_reset(st_);
        sqlite3_clear_bindings(st_);
    }
    std::int64_t int64(int c) { return sqlite3_column_int64(st_, c); }
    std::string text(int c) {
        const auto* p = sqlite3_column_text(st_, c);
        return p ? reinterpret_cast<const char*>(p) : "";
    }
    bool is_null(int c) { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
    double real(int c) { return sqlite3_column_double(st_, c); }
    std::vector<double> blob(int c) {
        const auto* p = static_cast<const std::byte*>(sqlite3_column_blob(st_, c));
        const auto n = static_cast<std::size_t>(sqlite3_column_bytes(st_, c)) / sizeof(double);
        std::vector<double> v(n);
        if (n) std::memcpy(v.data(), p, n * sizeof(double));
        return v;
    }

private:
    Statement& check(int rc) {
        if (rc != SQLITE_OK)
            throw std::runtime_error(fmt::format("sqlite bind failed: {}", sqlite3_errmsg(db_)));
        return *this;
    }
    sqlite3* db_;
    sqlite3_stmt* st_ = nullptr;
};

}  // namespace

Store::Store(const std::string& path) : path_(path) {
    std::error_code ec;
    const auto parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (sqlite3_open_v2(path.c_str(), &db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                        nullptr) != SQLITE_OK) {
        const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        db_ = nullptr;
        throw_input_error(path, "", "cannot open the results store: " + msg);
    }
    sqlite3_busy_timeout(db_, 120000);  // concurrent runs wait for each other's commits
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    exec(kSchema);
}

Store::~Store() { sqlite3_close(db_); }

void Store::exec(const char* sql) {
    // The busy handler does not cover every wait: SQLite answers SQLITE_BUSY at once where waiting could
    // deadlock (a journal-mode switch or schema creation racing another process opening the same new
    // store). Those statements are retried here, within the same two-minute bound.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (true) {
        char* err = nullptr;
        const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
        if (rc == SQLITE_OK) return;
        std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        const bool busy = (rc & 0xFF) == SQLITE_BUSY || (rc & 0xFF) == SQLITE_LOCKED;
        if (!busy || std::chrono::steady_clock::now() > deadline)
            throw_input_error(path_, "", "results store: " + msg);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

std::int64_t Store::model_id(const std::string& fp, const std::string& name, const std::string& path) {
    std::lock_guard lock(mu_);
    Statement ins(db_, "INSERT OR IGNORE INTO models(fingerprint, name, path) VALUES(?, ?, ?)");
    ins.bind(1, fp).bind(2, name).bind(3, path).step();
    Statement sel(db_, "SELECT id FROM models WHERE fingerprint = ?");
    sel.bind(1, fp);
    if (!sel.step()) throw std::runtime_error("model vanished from the store");
    return sel.int64(0);
}

std::optional<analysis::FieldValues> Store::get(const ResultKey& key,
                                                const std::vector<std::string>& fields) {
    std::lock_guard lock(mu_);
    Statement st(db_,
                 "SELECT field, value, vec FROM results WHERE model=? AND other=? AND tensor=? AND block=? "
                 "AND config=?");
    st.bind(1, key.model).bind(2, key.other).bind(3, key.tensor).bind(4, key.block).bind(5, key.config);
    analysis::FieldValues v;
    std::set<std::string> found;
    while (st.step()) {
        auto field = st.text(0);
        if (!st.is_null(2))
            v.vectors[field] = st.blob(2);
        else
            v.scalars[field] = st.is_null(1) ? std::nan("") : st.real(1);
        found.insert(std::move(field));
    }
    for (const auto& f : fields)
        if (!found.count(f)) return std::nullopt;
    return v;
}

void Store::put(const ResultKey& key, const analysis::FieldValues& values,
                const std::vector<std::string>& vector_fields) {
    std::lock_guard lock(mu_);
    exec("BEGIN IMMEDIATE");
    try {
        Statement st(db_,
                     "INSERT OR REPLACE INTO results(model, other, tensor, block, field, config, value, vec) "
                     "VALUES(?,?,?,?,?,?,?,?)");
        auto common = [&](const std::string& field) {
            st.bind(1, key.model)
                .bind(2, key.other)
                .bind(3, key.tensor)
                .bind(4, key.block)
                .bind(5, field)
                .bind(6, key.config);
        };
        for (const auto& [field, value] : values.scalars) {
            common(field);
            st.bind(7, value).bind_null(8).step();
            st.reset();
        }
        for (const auto& field : vector_fields) {
            auto it = values.vectors.find(field);
            if (it == values.vectors.end()) continue;
            common(field);
            st.bind_null(7).bind_blob(8, it->second).step();
            st.reset();
        }
        exec("COMMIT");
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

std::vector<ModelEntry> Store::models() {
    std::lock_guard lock(mu_);
    Statement st(db_,
                 "SELECT m.id, m.fingerprint, m.name, m.path, (SELECT COUNT(*) FROM results r WHERE r.model "
                 "= m.id) FROM models m ORDER BY m.id");
    std::vector<ModelEntry> out;
    while (st.step()) out.push_back({st.int64(0), st.text(1), st.text(2), st.text(3), st.int64(4)});
    return out;
}

std::map<std::string, std::int64_t> Store::field_counts() {
    std::lock_guard lock(mu_);
    Statement st(db_, "SELECT field, COUNT(*) FROM results GROUP BY field ORDER BY field");
    std::map<std::string, std::int64_t> out;
    while (st.step()) out[st.text(0)] = st.int64(1);
    return out;
}

std::int64_t Store::erase_model(const std::string& which) {
    std::lock_guard lock(mu_);
    Statement sel(db_, "SELECT id FROM models WHERE name = ? OR fingerprint LIKE ? || '%'");
    sel.bind(1, which).bind(2, which);
    std::vector<std::int64_t> ids;
    while (sel.step()) ids.push_back(sel.int64(0));
    if (ids.empty()) throw InputError(fmt::format("{}: no model '{}' in the store", path_, which));
    std::int64_t erased = 0;
    exec("BEGIN IMMEDIATE");
    for (auto id : ids) {
        Statement del(db_, "DELETE FROM results WHERE model = ? OR other = ?");
        del.bind(1, id).bind(2, id).step();
        erased += sqlite3_changes(db_);
        Statement delm(db_, "DELETE FROM models WHERE id = ?");
        delm.bind(1, id).step();
    }
    exec("COMMIT");
    return erased;
}

std::int64_t Store::erase_fields(const std::vector<std::string>& fields, const std::string& model) {
    std::lock_guard lock(mu_);
    std::int64_t erased = 0;
    exec("BEGIN IMMEDIATE");
    for (const auto& f : analysis::dependents_of(fields)) {
        Statement del(db_, model.empty() ? "DELETE FROM results WHERE field = ?"
                                         : "DELETE FROM results WHERE field = ? AND model IN (SELECT id FROM "
                                           "models WHERE name = ? OR fingerprint LIKE ? || '%')");
        del.bind(1, f);
        if (!model.empty()) del.bind(2, model).bind(3, model);
        del.step();
        erased += sqlite3_changes(db_);
    }
    exec("COMMIT");
    return erased;
}

std::int64_t Store::merge_from(const std::string& other_path) {
    std::lock_guard lock(mu_);
    if (!fs::is_regular_file(other_path)) throw_input_error(other_path, "", "no such store");
    Statement attach(db_, "ATTACH DATABASE ? AS other_store");
    attach.bind(1, other_path).step();
    exec("BEGIN IMMEDIATE");
    exec(
        "INSERT OR IGNORE INTO models(fingerprint, name, path) SELECT fingerprint, name, path FROM "
        "other_store.models");
    // Ids differ between stores: translate through the fingerprints.
    exec(R"sql(INSERT OR IGNORE INTO results(model, other, tensor, block, field, config, value, vec)
      SELECT m.id, COALESCE(mo.id, 0), r.tensor, r.block, r.field, r.config, r.value, r.vec
      FROM other_store.results r
      JOIN other_store.models om ON om.id = r.model
      JOIN models m ON m.fingerprint = om.fingerprint
      LEFT JOIN other_store.models oo ON oo.id = r.other
      LEFT JOIN models mo ON mo.fingerprint = oo.fingerprint)sql");
    const std::int64_t added = sqlite3_changes(db_);
    exec("COMMIT");
    exec("DETACH DATABASE other_store");
    return added;
}

void Store::for_each_result(const std::function<void(const ResultRow&)>& visit) {
    std::lock_guard lock(mu_);
    Statement st(
        db_, R"sql(SELECT m.name, COALESCE(o.name, ''), r.tensor, r.block, r.field, r.config, r.value, r.vec
      FROM results r JOIN models m ON m.id = r.model LEFT JOIN models o ON o.id = r.other
      ORDER BY m.id, r.other, r.tensor, r.block, r.field, r.config)sql");
    while (st.step()) {
        ResultRow row{st.text(0), st.text(1), st.text(2),   st.text(3),
                      st.text(4), st.text(5), std::nullopt, {}};
        if (!st.is_null(6)) row.value = st.real(6);
        if (!st.is_null(7)) row.vec = st.blob(7);
        visit(row);
    }
}

std::string fingerprint(const formats::Checkpoint& ck) {
    std::uint64_t h1 = 0xCBF29CE484222325ULL, h2 = 0x84222325CBF29CE4ULL;
    auto mix = [&](const void* data, std::size_t n) {
        const auto* p = static_cast<const unsigned char*>(data);
        for (std::size_t i = 0; i < n; ++i) {
            h1 = (h1 ^ p[i]) * 0x100000001B3ULL;
            h2 = (h2 ^ p[i]) * 0x100000001B3ULL + 0x9E3779B97F4A7C15ULL;
        }
    };
    constexpr std::size_t kSample = 64, kStride = 1 << 20;
    for (const auto& t : ck.tensors) {
        mix(t.name.data(), t.name.size());
        const auto dt = dtype_name(t.dtype);
        mix(dt.data(), dt.size());
        for (auto d : t.shape) mix(&d, sizeof(d));
        const auto bytes = t.bytes();
        // Page in only the sampled pages, and leave none of them mapped afterwards.
        t.file->expect_random_access(t.offset, t.nbytes, true);
        for (std::size_t off = 0; off < bytes.size(); off += kStride)
            mix(bytes.data() + off, std::min(kSample, bytes.size() - off));
        if (bytes.size() >= kSample) mix(bytes.data() + bytes.size() - kSample, kSample);
        t.file->dont_need(t.offset, t.nbytes);
        t.file->expect_random_access(t.offset, t.nbytes, false);
    }
    return fmt::format("{:016x}{:016x}", h1, h2);
}

}  // namespace diffract::store
