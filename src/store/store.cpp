#include "diffract/store/store.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <type_traits>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/output_path.hpp"

namespace fs = std::filesystem;

namespace diffract::store {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS results(
  content TEXT NOT NULL,
  other TEXT NOT NULL,
  block TEXT NOT NULL,
  config TEXT NOT NULL,
  field TEXT NOT NULL,
  value REAL,
  vec BLOB,
  PRIMARY KEY(content, other, block, config, field)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS models(
  id INTEGER PRIMARY KEY,
  name TEXT UNIQUE NOT NULL,
  path TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS model_tensors(
  name TEXT NOT NULL,
  tensor TEXT NOT NULL,
  content TEXT NOT NULL,
  file TEXT NOT NULL,
  device INTEGER, inode INTEGER, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER,
  PRIMARY KEY(name, tensor)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS model_tensors_content ON model_tensors(content);
CREATE TABLE IF NOT EXISTS pairs(
  name TEXT NOT NULL,
  other TEXT NOT NULL,
  PRIMARY KEY(name, other)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS file_hashes(
  device INTEGER NOT NULL, inode INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
  size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,
  hash TEXT NOT NULL,
  PRIMARY KEY(device, inode, offset, length)) WITHOUT ROWID;
)sql";

constexpr const char* kTables[] = {"results", "models", "model_tensors", "pairs", "file_hashes"};

// SQLite failures a user's environment causes (a full disk, a read-only medium, a file that is not a
// database) are input errors naming the store; anything else is a bug.
[[noreturn]] void throw_sqlite(int rc, const std::string& path, const std::string& what) {
    switch (rc & 0xFF) {
        case SQLITE_NOTADB:
        case SQLITE_CORRUPT:
        case SQLITE_FULL:
        case SQLITE_READONLY:
        case SQLITE_IOERR:
        case SQLITE_CANTOPEN:
        case SQLITE_PERM:
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
        case SQLITE_AUTH:
            throw_input_error(path, "", "results store: " + what);
        default:
            throw std::runtime_error(fmt::format("{}: results store: {}", path, what));
    }
}

// A prepared statement that finalizes itself.
class Statement {
public:
    Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
        const int rc = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr);
        if (rc != SQLITE_OK) throw_sqlite(rc, path_, fmt::format("{} ({})", sqlite3_errmsg(db), sql));
    }
    ~Statement() { sqlite3_finalize(st_); }
    Statement& bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(st_, i, v)); }
    Statement& bind(int i, std::uint64_t v) { return bind(i, static_cast<std::int64_t>(v)); }
    Statement& bind(int i, const std::string& v) {
        return check(sqlite3_bind_text(st_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    Statement& bind(int i, double v) {
        return check(std::isnan(v) ? sqlite3_bind_null(st_, i) : sqlite3_bind_double(st_, i, v));
    }
    Statement& bind_null(int i) { return check(sqlite3_bind_null(st_, i)); }
    // device, inode, size, mtime_ns, ctime_ns at parameters first .. first + 4.
    Statement& bind_identity(int first, const FileIdentity& f) {
        return bind(first, f.device)
            .bind(first + 1, f.inode)
            .bind(first + 2, f.size)
            .bind(first + 3, f.mtime_ns)
            .bind(first + 4, f.ctime_ns);
    }
    Statement& bind_blob(int i, const std::vector<double>& v) {
        return check(sqlite3_bind_blob(st_, i, v.data(), static_cast<int>(v.size() * sizeof(double)),
                                       SQLITE_TRANSIENT));
    }
    bool step() {
        const int rc = sqlite3_step(st_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw_sqlite(rc, path_, sqlite3_errmsg(db_));
    }
    void reset() {
        sqlite3_reset(st_);
        sqlite3_clear_bindings(st_);
    }
    std::int64_t int64(int c) { return sqlite3_column_int64(st_, c); }
    // The whole stored text: a tensor name may hold NUL characters, where a C string would stop.
    std::string text(int c) {
        const auto* p = sqlite3_column_text(st_, c);
        if (!p) return "";
        return std::string(reinterpret_cast<const char*>(p),
                           static_cast<std::size_t>(sqlite3_column_bytes(st_, c)));
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
        if (rc != SQLITE_OK) throw_sqlite(rc, path_, sqlite3_errmsg(db_));
        return *this;
    }
    sqlite3* db_;
    const std::string& path_;
    sqlite3_stmt* st_ = nullptr;
};

void exec_sql(sqlite3* db, const std::string& path, const char* sql) {
    // The busy handler does not cover every wait: SQLite answers SQLITE_BUSY at once where waiting could
    // deadlock (a journal-mode switch or schema creation racing another process opening the same new
    // store). Those statements are retried here, within the same two-minute bound.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (true) {
        char* err = nullptr;
        const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
        if (rc == SQLITE_OK) return;
        std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        const bool busy = (rc & 0xFF) == SQLITE_BUSY || (rc & 0xFF) == SQLITE_LOCKED;
        if (!busy || std::chrono::steady_clock::now() > deadline)
            throw_sqlite(busy ? rc : SQLITE_IOERR, path, msg);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

}  // namespace

std::string display_block(const std::string& store_block) {
    return store_block.substr(0, store_block.find('@'));
}

namespace {

// The schema, in WAL mode, written into a database with no table yet.
void create_schema(sqlite3* db, const std::string& path) {
    exec_sql(db, path, "PRAGMA journal_mode=WAL");
    exec_sql(db, path, "PRAGMA synchronous=NORMAL");
    exec_sql(db, path, "BEGIN IMMEDIATE");
    exec_sql(db, path, kSchema);
    exec_sql(db, path, fmt::format("PRAGMA user_version={}", kSchemaVersion).c_str());
    exec_sql(db, path, "COMMIT");
}

// A new store appears whole: its schema is written to a temporary sibling that is then renamed into
// place without replacing anything. So a store path never shows an empty file that diffract made, and
// an empty file found there is someone else's (refused, never turned into a database), while two runs
// creating one store at once still share it (the second rename finds the first's store).
void create_store_file(const std::string& path) {
    const fs::path target(path);
    const fs::path tmp =
        target.parent_path() / fmt::format(".{}.tmp-{}-{:x}", target.filename().string(),
                                           static_cast<long>(getpid()),
                                           std::chrono::steady_clock::now().time_since_epoch().count());
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(tmp.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
        sqlite3_close(db);
        return;  // the open of `path` below reports what is wrong with the place
    }
    try {
        create_schema(db, tmp.string());
    } catch (...) {
        sqlite3_close(db);
        std::error_code ec;
        fs::remove(tmp, ec);
        throw;
    }
    sqlite3_close(db);  // checkpoints the WAL into the file and removes it
    std::error_code ec;
    if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0)
        fs::remove(tmp, ec);
    for (const char* suffix : {"-wal", "-shm"}) fs::remove(tmp.string() + suffix, ec);
}

}  // namespace

Store::Store(const std::string& path, StoreMode mode) : path_(path) {
    std::error_code ec;
    bool writable = mode == StoreMode::read_write;
    if (struct statvfs fs_info{}; writable && fs::is_regular_file(path, ec) &&
                                  ::statvfs(path.c_str(), &fs_info) == 0 && (fs_info.f_flag & ST_RDONLY)) {
        read_only_medium_ = true;
        writable = false;
        mode = StoreMode::read_only;
    }
    if (writable) {
        const auto parent = fs::path(path).parent_path();
        if (!parent.empty()) fs::create_directories(parent, ec);
        if (!fs::exists(fs::symlink_status(path, ec))) create_store_file(path);
    } else if (const auto status = fs::status(path, ec); !fs::exists(status)) {
        throw_input_error(path, "", "no results store here");
    } else if (!fs::is_regular_file(status)) {
        throw_input_error(path, "", fmt::format("{}, not a results store", file_type_name(status.type())));
    }
    if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
        throw_input_error(path, "", "the results store is not a regular file");
    // SQLite would make an existing empty file a database: it is someone's file, not a store.
    if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == 0 && !ec)
        throw_input_error(path, "",
                          "an empty file, not a diffract results store; give a new path or a store");
    auto open = [&](const std::string& name, int flags) {
        sqlite3_close(db_);
        db_ = nullptr;
        const int rc = sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_FULLMUTEX, nullptr);
        return rc == SQLITE_OK;
    };
    bool ok =
        writable ? open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) : open(path, SQLITE_OPEN_READONLY);
    if (ok && !writable &&
        sqlite3_exec(db_, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) != SQLITE_OK)
        ok = false;
    if (!ok && !writable) {
        // A WAL store on a read-only medium cannot create its shared-memory file: read it as an
        // immutable file (no other process can be writing to a read-only medium).
        const std::string uri = "file:" + fs::absolute(path, ec).string() + "?immutable=1";
        ok = open(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    }
    if (!ok) {
        const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        db_ = nullptr;
        throw_input_error(path, "", "cannot open the results store: " + msg);
    }
    sqlite3_busy_timeout(db_, 120000);  // concurrent runs wait for each other's commits
    try {
        check_schema(mode);
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

Store::~Store() { sqlite3_close(db_); }

void Store::check_schema(StoreMode mode) {
    std::int64_t version = 0, tables = 0;
    {
        Statement v(db_, path_, "PRAGMA user_version");
        if (v.step()) version = v.int64(0);
        Statement t(db_, path_, "SELECT count(*) FROM sqlite_master");
        if (t.step()) tables = t.int64(0);
    }
    if (version == 0 && tables == 0) {
        if (mode == StoreMode::read_only) throw_input_error(path_, "", "an empty file, not a results store");
        create_schema(db_, path_);
        return;
    }
    if (version == 0)
        throw_input_error(
            path_, "",
            "not a results store of this diffract (schema 1 or another SQLite database): move it "
            "away and re-run; schema 1 results were keyed by sampled bytes and cannot be reused");
    if (version != kSchemaVersion)
        throw_input_error(
            path_, "",
            fmt::format("results store of schema version {} (this diffract reads version {}){}", version,
                        kSchemaVersion, version > kSchemaVersion ? ": written by a newer diffract" : ""));
    for (const char* table : kTables) {
        Statement t(db_, path_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?");
        t.bind(1, std::string(table));
        if (!t.step() || t.int64(0) != 1)
            throw_input_error(path_, "",
                              fmt::format("results store without its '{}' table (damaged?)", table));
    }
    if (mode == StoreMode::read_write) exec("PRAGMA synchronous=NORMAL");
}

void Store::exec(const char* sql) { exec_sql(db_, path_, sql); }

void Store::check_intact() {
    // Errors name this store (the Statement's path); so does a damage the check reports in rows.
    Statement check(db_, path_, "PRAGMA integrity_check(1)");
    if (check.step() && check.text(0) != "ok")
        throw_input_error(path_, "", "results store is damaged: " + one_line(check.text(0)));
}

namespace {

// Runs `body` in one write transaction, rolled back if it throws.
template <typename F>
auto in_transaction(sqlite3* db, const std::string& path, F&& body) {
    exec_sql(db, path, "BEGIN IMMEDIATE");
    try {
        if constexpr (std::is_void_v<decltype(body())>) {
            body();
            exec_sql(db, path, "COMMIT");
        } else {
            auto r = body();
            exec_sql(db, path, "COMMIT");
            return r;
        }
    } catch (...) {
        sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

}  // namespace

void Store::record_model(const std::string& name, const std::string& path,
                         const std::vector<TensorRecord>& tensors) {
    if (read_only_medium_) return;  // bookkeeping only: what a read-only store holds stays as it is
    std::lock_guard lock(mu_);
    in_transaction(db_, path_, [&] {
        // A name moved to another checkpoint keeps nothing of the one it named before.
        Statement was(db_, path_, "SELECT path FROM models WHERE name = ?");
        was.bind(1, name);
        if (was.step() && was.text(0) != path)
            for (const char* sql : {"DELETE FROM model_tensors WHERE name = ?1",
                                    "DELETE FROM pairs WHERE name = ?1 OR other = ?1"}) {
                Statement del(db_, path_, sql);
                del.bind(1, name).step();
            }
        Statement model(db_, path_,
                        "INSERT INTO models(name, path) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET path = "
                        "excluded.path");
        model.bind(1, name).bind(2, path).step();
        // Rows of earlier runs: kept only while their file is unchanged (a tensor this run did not
        // hash, under a selection, still shows its results; a rewritten file's rows are dropped).
        Statement old(db_, path_,
                      "SELECT tensor, file, device, inode, size, mtime_ns, ctime_ns FROM model_tensors WHERE "
                      "name = ?");
        old.bind(1, name);
        std::vector<std::string> stale;
        while (old.step()) {
            const auto now = file_identity(old.text(1));
            const bool same =
                !old.is_null(2) && now &&
                *now == FileIdentity{static_cast<std::uint64_t>(old.int64(2)),
                                     static_cast<std::uint64_t>(old.int64(3)),
                                     static_cast<std::uint64_t>(old.int64(4)), old.int64(5), old.int64(6)};
            if (!same) stale.push_back(old.text(0));
        }
        Statement drop(db_, path_, "DELETE FROM model_tensors WHERE name = ? AND tensor = ?");
        for (const auto& t : stale) {
            drop.bind(1, name).bind(2, t).step();
            drop.reset();
        }
        Statement put(
            db_, path_,
            "INSERT OR REPLACE INTO model_tensors(name, tensor, content, file, device, inode, size, "
            "mtime_ns, ctime_ns) VALUES(?,?,?,?,?,?,?,?,?)");
        for (const auto& t : tensors) {
            put.bind(1, name).bind(2, t.tensor).bind(3, t.content).bind(4, t.file);
            if (t.identity) put.bind_identity(5, *t.identity);
            put.step();
            put.reset();
        }
    });
}

void Store::record_pair(const std::string& name, const std::string& base) {
    if (read_only_medium_) return;  // bookkeeping only: what a read-only store holds stays as it is
    std::lock_guard lock(mu_);
    Statement st(db_, path_, "INSERT OR IGNORE INTO pairs(name, other) VALUES(?, ?)");
    st.bind(1, name).bind(2, base).step();
}

std::optional<FieldValues> Store::get(const ResultKey& key, const std::vector<std::string>& fields) {
    std::lock_guard lock(mu_);
    Statement st(
        db_, path_,
        "SELECT field, value, vec FROM results WHERE content=? AND other=? AND block=? AND config=?");
    st.bind(1, key.content).bind(2, key.other).bind(3, key.block).bind(4, key.config);
    FieldValues v;
    std::set<std::string> found;
    while (st.step()) {
        auto field = st.text(0);
        if (!st.is_null(2)) {
            v.vectors[field] = st.blob(2);
        } else {
            const double value = st.is_null(1) ? std::nan("") : st.real(1);
            if (!read_stored(v.bookkeeping, field, value)) v.scalars[field] = value;
        }
        found.insert(std::move(field));
    }
    for (const auto& f : fields)
        if (!found.count(f)) return std::nullopt;
    return v;
}

void Store::put(const ResultKey& key, const FieldValues& values,
                const std::vector<std::string>& vector_fields) {
    if (key.content.empty()) throw std::logic_error("store: a result without a content id");
    if (read_only_medium_)
        throw_input_error(path_, "",
                          "the results store is on a read-only file system: a result cannot be kept");
    std::lock_guard lock(mu_);
    in_transaction(db_, path_, [&] {
        Statement st(db_, path_,
                     "INSERT OR REPLACE INTO results(content, other, block, config, field, value, vec) "
                     "VALUES(?,?,?,?,?,?,?)");
        auto common = [&](const std::string& field) {
            st.bind(1, key.content).bind(2, key.other).bind(3, key.block).bind(4, key.config).bind(5, field);
        };
        const auto scalar = [&](const std::string& field, double value) {
            common(field);
            st.bind(6, value).bind_null(7).step();
            st.reset();
        };
        for (const auto& [field, value] : values.scalars) scalar(field, value);
        for_each_stored(values.bookkeeping, scalar);
        for (const auto& field : vector_fields) {
            auto it = values.vectors.find(field);
            if (it == values.vectors.end()) continue;
            common(field);
            st.bind_null(6).bind_blob(7, it->second).step();
            st.reset();
        }
    });
}

std::optional<std::string> Store::cached_hash(const FileIdentity& file, std::uint64_t offset,
                                              std::uint64_t length) {
    std::lock_guard lock(mu_);
    Statement st(db_, path_,
                 "SELECT hash FROM file_hashes WHERE device=? AND inode=? AND size=? AND mtime_ns=? AND "
                 "ctime_ns=? AND offset=? AND length=?");
    st.bind_identity(1, file).bind(6, offset).bind(7, length);
    if (!st.step()) return std::nullopt;
    return st.text(0);
}

void Store::cache_hash(const FileIdentity& file, std::uint64_t offset, std::uint64_t length,
                       const std::string& hash) {
    if (read_only_medium_) return;
    std::lock_guard lock(mu_);
    Statement st(
        db_, path_,
        "INSERT OR REPLACE INTO file_hashes(device, inode, size, mtime_ns, ctime_ns, offset, length, "
        "hash) VALUES(?,?,?,?,?,?,?,?)");
    st.bind_identity(1, file).bind(6, offset).bind(7, length).bind(8, hash).step();
}

std::vector<ModelEntry> Store::models() {
    std::lock_guard lock(mu_);
    Statement st(db_, path_, R"sql(SELECT m.name, m.path,
        (SELECT COUNT(*) FROM model_tensors t WHERE t.name = m.name),
        (SELECT COUNT(*) FROM results r WHERE r.content IN
            (SELECT content FROM model_tensors t WHERE t.name = m.name))
      FROM models m ORDER BY m.id)sql");
    std::vector<ModelEntry> out;
    while (st.step()) out.push_back({st.text(0), st.text(1), st.int64(2), st.int64(3)});
    return out;
}

std::vector<std::string> Store::input_paths() {
    std::lock_guard lock(mu_);
    Statement st(db_, path_, "SELECT path FROM models UNION SELECT DISTINCT file FROM model_tensors");
    std::vector<std::string> out;
    while (st.step()) out.push_back(st.text(0));
    return out;
}

std::map<std::string, std::int64_t> Store::field_counts() {
    std::lock_guard lock(mu_);
    Statement st(db_, path_, "SELECT field, COUNT(*) FROM results GROUP BY field ORDER BY field");
    std::map<std::string, std::int64_t> out;
    while (st.step()) out[st.text(0)] = st.int64(1);
    return out;
}

namespace {

// Throws InputError, listing the names the store has, unless a model is called exactly `name`.
void require_model(sqlite3* db, const std::string& path, const std::string& name) {
    Statement sel(db, path, "SELECT COUNT(*) FROM models WHERE name = ?");
    sel.bind(1, name);
    if (sel.step() && sel.int64(0) > 0) return;
    Statement st(db, path, "SELECT name FROM models ORDER BY id");
    std::string names;
    while (st.step()) names += (names.empty() ? "" : ", ") + st.text(0);
    throw_input_error(
        path, "",
        fmt::format("no model named '{}' in the store (models: {})", name, names.empty() ? "none" : names));
}

}  // namespace

std::int64_t Store::erase_model(const std::string& name) {
    std::lock_guard lock(mu_);
    require_model(db_, path_, name);
    return in_transaction(db_, path_, [&] {
        exec("CREATE TEMP TABLE IF NOT EXISTS erased(content TEXT PRIMARY KEY)");
        exec("DELETE FROM temp.erased");
        Statement keep(db_, path_,
                       "INSERT OR IGNORE INTO temp.erased SELECT content FROM model_tensors WHERE name = ?");
        keep.bind(1, name).step();
        exec("CREATE TEMP TABLE IF NOT EXISTS touched(content TEXT PRIMARY KEY)");
        exec("DELETE FROM temp.touched");
        exec("INSERT INTO temp.touched SELECT content FROM temp.erased");
        for (const char* sql :
             {"DELETE FROM model_tensors WHERE name = ?", "DELETE FROM pairs WHERE name = ?1 OR other = ?1",
              "DELETE FROM models WHERE name = ?"}) {
            Statement del(db_, path_, sql);
            del.bind(1, name).step();
        }
        // The results of contents that another name still holds stay: they are that model's too.
        exec("DELETE FROM temp.erased WHERE content IN (SELECT content FROM model_tensors)");
        Statement del(
            db_, path_,
            "DELETE FROM results WHERE content IN (SELECT content FROM temp.erased) OR (other <> '' AND "
            "other IN (SELECT content FROM temp.erased))");
        del.step();
        auto erased = static_cast<std::int64_t>(sqlite3_changes(db_));
        // A comparison stays only while a recorded pair still reaches it (for_each_result's rule): one
        // whose base content another name holds, but no pair links that name, could never be exported.
        Statement unreachable(db_, path_, R"sql(
          DELETE FROM results WHERE other <> '' AND
            (content IN (SELECT content FROM temp.touched) OR other IN (SELECT content FROM temp.touched))
            AND NOT EXISTS (SELECT 1 FROM pairs p
              JOIN model_tensors n ON n.name = p.name AND n.content = results.content
              JOIN model_tensors b ON b.name = p.other AND b.tensor = n.tensor AND b.content = results.other))sql");
        unreachable.step();
        erased += static_cast<std::int64_t>(sqlite3_changes(db_));
        return erased;
    });
}

std::int64_t Store::erase_fields(const std::vector<std::string>& fields, const std::string& model) {
    std::lock_guard lock(mu_);
    if (!model.empty()) require_model(db_, path_, model);
    return in_transaction(db_, path_, [&] {
        std::int64_t erased = 0;
        for (const auto& f : fields) {
            Statement del(db_, path_,
                          model.empty()
                              ? "DELETE FROM results WHERE field = ?"
                              : "DELETE FROM results WHERE field = ? AND content IN (SELECT content FROM "
                                "model_tensors WHERE name = ?)");
            del.bind(1, f);
            if (!model.empty()) del.bind(2, model);
            del.step();
            erased += sqlite3_changes(db_);
        }
        return erased;
    });
}

std::int64_t Store::merge_from(const std::string& other_path) {
    std::lock_guard lock(mu_);
    std::error_code ec;
    const auto status = fs::status(other_path, ec);
    if (!fs::exists(status)) throw_input_error(other_path, "", "no such store");
    if (!fs::is_regular_file(status))
        throw_input_error(other_path, "",
                          fmt::format("{}, not a results store", file_type_name(status.type())));
    const auto mine = file_identity(path_), theirs = file_identity(other_path);
    if (mine && theirs && mine->device == theirs->device && mine->inode == theirs->inode)
        throw_input_error(other_path, "", "is this store itself: nothing to merge");
    {
        // Validates the other file (a store of this schema) before anything is attached.
        Store other(other_path, StoreMode::read_only);
        other.check_intact();
    }
    Statement attach(db_, path_, "ATTACH DATABASE ? AS other_store");
    attach.bind(1, other_path).step();
    try {
        // One name, one checkpoint: a name whose tensors hold other contents in the other store (another
        // checkpoint under the same name) would keep this store's meaning, and the other store's results
        // under it could never be exported. Refused before anything is merged.
        Statement clash(db_, path_, R"sql(
          SELECT o.name, (SELECT path FROM main.models WHERE name = o.name),
                 (SELECT path FROM other_store.models WHERE name = o.name)
            FROM other_store.model_tensors o JOIN main.model_tensors m ON m.name = o.name AND m.tensor = o.tensor
           WHERE m.content <> o.content LIMIT 1)sql");
        if (clash.step())
            throw_input_error(other_path, "",
                              fmt::format("the name '{}' is {} here but {} in {} (other tensor contents); "
                                          "erase it from one of the two stores (store erase --model {}) "
                                          "before merging",
                                          clash.text(0), clash.text(2), clash.text(1), path_, clash.text(0)));
        const auto added = in_transaction(db_, path_, [&] {
            exec("INSERT OR IGNORE INTO results SELECT * FROM other_store.results");
            const std::int64_t n = sqlite3_changes(db_);
            exec(
                "INSERT OR IGNORE INTO models(name, path) SELECT name, path FROM other_store.models "
                "ORDER BY id");
            exec("INSERT OR IGNORE INTO model_tensors SELECT * FROM other_store.model_tensors");
            exec("INSERT OR IGNORE INTO pairs SELECT * FROM other_store.pairs");
            exec("INSERT OR IGNORE INTO file_hashes SELECT * FROM other_store.file_hashes");
            return n;
        });
        exec("DETACH DATABASE other_store");
        return added;
    } catch (...) {
        sqlite3_exec(db_, "DETACH DATABASE other_store", nullptr, nullptr, nullptr);
        throw;
    }
}

void Store::for_each_result(const std::function<void(const ResultRow&)>& visit) {
    std::lock_guard lock(mu_);
    // Single-model results under every name holding their content; cross-model results under every
    // recorded (model, base) pair whose same-named tensors hold the pair's contents.
    Statement st(db_, path_, R"sql(
      SELECT m.id, 0 AS oid, n.name, '' AS other, n.tensor, r.block, r.field, r.config, r.value, r.vec
        FROM model_tensors n JOIN models m ON m.name = n.name
        JOIN results r ON r.content = n.content AND r.other = ''
      UNION ALL
      SELECT m.id, o.id, p.name, p.other, n.tensor, r.block, r.field, r.config, r.value, r.vec
        FROM pairs p JOIN models m ON m.name = p.name JOIN models o ON o.name = p.other
        JOIN model_tensors n ON n.name = p.name
        JOIN model_tensors b ON b.name = p.other AND b.tensor = n.tensor
        JOIN results r ON r.content = n.content AND r.other = b.content
      ORDER BY 1, 2, 5, 6, 7, 8)sql");
    while (st.step()) {
        ResultRow row{st.text(2), st.text(3), st.text(4),   display_block(st.text(5)),
                      st.text(6), st.text(7), std::nullopt, {}};
        if (!st.is_null(8)) row.value = st.real(8);
        if (!st.is_null(9)) row.vec = st.blob(9);
        visit(row);
    }
}

}  // namespace diffract::store
