#include "diffract/run/shipped_inputs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/run/distributed.hpp"

namespace diffract::run {
namespace fs = std::filesystem;
namespace {

enum : int { kTagSkeleton = 4, kTagTensor = 5 };

// Beside a file given alone, the opener reads its directory's config.json (and a model's other JSON
// files); those travel whole. Larger files beside a checkpoint (an optimizer state) are not model inputs.
constexpr std::uintmax_t kSiblingLimit = std::uintmax_t{16} << 20;
constexpr std::uintmax_t kWholeFileLimit = std::uintmax_t{64} << 20;

// u64-length-prefixed fields, little-endian as the machines are.
void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_text(std::string& out, std::string_view s) {
    put_u64(out, s.size());
    out.append(s);
}

class Reader {
public:
    explicit Reader(const std::string& bytes) : bytes_(bytes) {}
    std::uint64_t u64() {
        std::uint64_t v = 0;
        need(sizeof v);
        std::memcpy(&v, bytes_.data() + at_, sizeof v);
        at_ += sizeof v;
        return v;
    }
    std::string_view text() {
        const auto n = u64();
        need(n);
        const std::string_view s(bytes_.data() + at_, n);
        at_ += n;
        return s;
    }
    bool done() const { return at_ == bytes_.size(); }

private:
    void need(std::uint64_t n) const {
        if (bytes_.size() - at_ < n)
            throw std::runtime_error("--ship-inputs: a malformed message from rank 0");
    }
    const std::string& bytes_;
    std::size_t at_ = 0;
};

void write_at(int fd, const std::string& path, std::uint64_t offset, std::string_view bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const auto n =
            ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
        done += static_cast<std::size_t>(n);
    }
}

// This worker's staged inputs. Each input's files are written under a directory of its own, opened, and
// the directory is removed at once: the open files live on in the mappings and in the descriptors kept
// here (through which ship_task_inputs fills the holes), so nothing is left in $TMPDIR however the
// worker ends — a kill included.
class Staging {
public:
    // A new, empty directory for the next input.
    fs::path next_directory() {
        const auto dir =
            fs::temp_directory_path() / fmt::format("diffract-inputs-{}-rank{}-{}-{}", host_name(),
                                                    distributed().rank, ::getpid(), inputs_++);
        fs::create_directories(dir);
        return dir;
    }
    // Creates `path` as a sparse file of `size` bytes, kept open for writing.
    int create(const fs::path& path, std::uint64_t size) {
        fs::create_directories(path.parent_path());
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + path.string());
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            const int err = errno;
            ::close(fd);
            throw std::system_error(err, std::generic_category(), "cannot stat " + path.string());
        }
        files_[{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)}] = fd;
        if (::ftruncate(fd, static_cast<off_t>(size)) != 0)  // holes: no disk used
            throw std::system_error(errno, std::generic_category(), "cannot size " + path.string());
        return fd;
    }
    // The descriptor of the staged file `file` maps (by device and inode: its directory is gone), or -1
    // for a file that is not one: an input of this host is never written.
    int descriptor(const MappedFile& file) const {
        const auto& id = file.identity();
        if (!id) return -1;
        const auto it = files_.find({id->device, id->inode});
        return it == files_.end() ? -1 : it->second;
    }
    static void remove(const fs::path& dir) {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    ~Staging() {
        for (const auto& [path, fd] : files_) ::close(fd);
    }

private:
    int inputs_ = 0;
    std::map<std::pair<std::uint64_t, std::uint64_t>, int> files_;
};
Staging staging;

struct Range {
    std::uint64_t offset, length;
};

// Whether `t` is stored in `file`.
bool stored_in(const TensorInfo& t, const std::string& file) { return t.file && t.path() == file; }

// The byte ranges of `file` that are not inside one of `ck`'s tensors stored there (sorted, merged).
std::vector<Range> outside_tensors(const formats::Checkpoint& ck, const std::string& file,
                                   std::uint64_t size) {
    std::vector<Range> inside;
    for (const auto& t : ck.tensors)
        for (const auto* part : stored_parts(t))
            if (stored_in(*part, file) && part->nbytes > 0) inside.push_back({part->offset, part->nbytes});
    std::sort(inside.begin(), inside.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
    std::vector<Range> out;
    std::uint64_t at = 0;
    for (const auto& r : inside) {
        if (r.offset > at) out.push_back({at, r.offset - at});
        at = std::max(at, r.offset + r.length);
    }
    if (at < size) out.push_back({at, size - at});
    return out;
}

// Whether any of `ck`'s tensors is stored in `file`.
bool holds_tensors(const formats::Checkpoint& ck, const std::string& file) {
    for (const auto& t : ck.tensors)
        for (const auto* part : stored_parts(t))
            if (stored_in(*part, file)) return true;
    return false;
}

// The files of input path `p` that a worker needs: a directory's own files, or a file with the JSON files
// beside it. Each with the name it has under the input's staged copy ("" for `p` itself, a file).
std::vector<std::pair<fs::path, std::string>> files_of(const fs::path& p) {
    std::vector<std::pair<fs::path, std::string>> out;
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
        for (const auto& e : fs::directory_iterator(p, ec))
            if (e.is_regular_file(ec)) out.emplace_back(e.path(), e.path().filename().string());
        return out;
    }
    out.emplace_back(p, "");
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path() != p && e.is_regular_file(ec) && e.path().extension() == ".json" &&
            e.file_size(ec) <= kSiblingLimit)
            out.emplace_back(e.path(), "../" + e.path().filename().string());
    return out;
}

// One staged file: its name under the input's slot, its size, and the ranges of it sent (the rest are
// holes, filled later by ship_task_inputs).
std::string encode_file(const formats::Checkpoint& ck, const fs::path& file, const std::string& staged_name) {
    const auto path = file.string();
    const auto mapped = MappedFile::open(path);
    const auto bytes = mapped->bytes();
    const auto ranges = holds_tensors(ck, path) ? outside_tensors(ck, path, bytes.size())
                                                : std::vector<Range>{{0, bytes.size()}};
    std::string out;
    put_text(out, staged_name);
    put_u64(out, bytes.size());
    put_u64(out, ranges.size());
    for (const auto& r : ranges) {
        put_u64(out, r.offset);
        put_text(out, std::string_view(reinterpret_cast<const char*>(bytes.data()) + r.offset, r.length));
    }
    return out;
}

// Writes one staged file under `dir` (the input path's staged copy) from its message.
void stage_file(const fs::path& dir, const std::string& message) {
    Reader in(message);
    const auto name = std::string(in.text());
    const fs::path path = name.empty() ? dir : (dir / name).lexically_normal();
    const int fd = staging.create(path, in.u64());
    for (auto n = in.u64(); n > 0; --n) {
        const auto offset = in.u64();
        write_at(fd, path.string(), offset, in.text());
    }
}

// The stored tensors `share`'s tasks read (tensors_read, LoRA-merged ones as their parts), each once, in
// an order every rank computes alike.
std::vector<const TensorInfo*> share_reads(const std::vector<Task>& tasks,
                                           const std::vector<std::size_t>& share) {
    std::vector<const TensorInfo*> out;
    std::set<const TensorInfo*> seen;
    for (const auto* t : tensors_read(tasks, share))
        for (const auto* part : stored_parts(*t))
            if (part->file && !part->file->is_generated() && !part->path().empty() &&
                seen.insert(part).second)
                out.push_back(part);
    return out;
}

}  // namespace

formats::Checkpoint open_input(const std::string& spec, bool shipped) {
    const auto& world = distributed();
    if (!shipped || world.size == 1) return formats::open_checkpoint(spec);
    if (world.is_root()) {
        auto ck = formats::open_checkpoint(spec);
        // The spec a worker opens: the same name, each input path replaced by its staged copy.
        std::string manifest;
        put_text(manifest, ck.name);
        const auto paths = ck.input_paths();
        put_u64(manifest, paths.size());
        std::vector<std::vector<std::string>> files(paths.size());
        for (std::size_t j = 0; j < paths.size(); ++j) {
            const fs::path p(paths[j]);
            put_text(manifest, p.filename().string());
            for (const auto& [file, name] : files_of(p)) {
                std::error_code ec;
                if (!holds_tensors(ck, file.string()) && fs::file_size(file, ec) > kWholeFileLimit) continue;
                files[j].push_back(encode_file(ck, file, name));
            }
            put_u64(manifest, files[j].size());
        }
        for (int r = 1; r < world.size; ++r) {
            send_bytes(r, kTagSkeleton, manifest);
            for (const auto& of_path : files)
                for (const auto& f : of_path) send_bytes(r, kTagSkeleton, f);
        }
        return ck;
    }
    const auto manifest = receive_bytes(0, kTagSkeleton);
    Reader in(manifest);
    const auto name = std::string(in.text());
    const fs::path root = staging.next_directory();
    std::vector<std::string> staged;
    for (auto j = in.u64(), i = decltype(j){0}; i < j; ++i) {
        const fs::path dir = root / std::to_string(i) / std::string(in.text());
        staged.push_back(dir.string());
        for (auto n = in.u64(); n > 0; --n) stage_file(dir, receive_bytes(0, kTagSkeleton));
    }
    if (staged.empty()) throw std::runtime_error("--ship-inputs: rank 0 sent an input without paths");
    std::string local = name + "=" + staged[0];
    for (std::size_t j = 1; j < staged.size(); ++j) local += "+" + staged[j];
    try {
        auto ck = formats::open_checkpoint(local);
        Staging::remove(root);
        return ck;
    } catch (...) {
        Staging::remove(root);
        throw;
    }
}

std::size_t ship_task_inputs(const std::vector<Task>& tasks,
                             const std::vector<std::vector<std::size_t>>& shares) {
    const auto& world = distributed();
    if (world.size == 1) return 0;
    std::size_t sent = 0;
    // First the list of what follows, so that a worker whose skeleton planned other tensors says so
    // instead of waiting for bytes that never come.
    const auto listing = [](const std::vector<const TensorInfo*>& reads) {
        std::string out;
        for (const auto* t : reads) out += fmt::format("{} {}\n", t->name, t->nbytes);
        return out;
    };
    if (world.is_root()) {
        for (int r = 1; r < world.size; ++r) {
            const auto reads = share_reads(tasks, shares[static_cast<std::size_t>(r)]);
            send_bytes(r, kTagTensor, listing(reads));
            for (const auto* t : reads) {
                send_bytes(r, kTagTensor, t->bytes());
                sent += t->nbytes;
            }
        }
        return sent;
    }
    const auto reads = share_reads(tasks, shares[static_cast<std::size_t>(world.rank)]);
    if (receive_bytes(0, kTagTensor) != listing(reads))
        throw InputError(
            "--ship-inputs: the skeleton rank 0 sent plans other tensors for this rank's tasks than rank 0 "
            "does: not the same model");
    for (const auto* t : reads) {
        const auto bytes = receive_bytes(0, kTagTensor);
        // Only ever into this worker's own staged copy: an input of its own host is never written.
        const int fd = staging.descriptor(*t->file);
        if (fd < 0)
            throw std::runtime_error(fmt::format("--ship-inputs: {} is not a staged input", t->path()));
        if (bytes.size() != t->nbytes)
            throw InputError(
                fmt::format("{}: tensor {}: rank 0 sent {} bytes where its skeleton holds {}: "
                            "rank 0 planned another model",
                            t->path(), t->name, bytes.size(), t->nbytes));
        write_at(fd, t->path(), t->offset, bytes);
    }
    return 0;
}

}  // namespace diffract::run
