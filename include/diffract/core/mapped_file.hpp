// A file mapped read-only into memory. Tensor views hold a shared_ptr to the mapping, so a view
// can never outlive the bytes it points at. Pages are read on demand: nothing loads a model whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace diffract {

// What identifies a file's bytes without reading them: a file with the same device, inode, size and
// modification and change times (nanoseconds) holds the same bytes, unless its writer forged both
// times. Caches of per-file work (content hashes) are keyed by it.
struct FileIdentity {
    std::uint64_t device = 0, inode = 0, size = 0;
    std::int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const FileIdentity&) const = default;
};

// The identity of the regular file at `path` now; empty if there is none.
std::optional<FileIdentity> file_identity(const std::string& path);

class MappedFile {
public:
    // Maps `path` read-only. Throws InputError naming the path and strerror on failure.
    static std::shared_ptr<const MappedFile> open(const std::string& path);
    // Views `size` bytes at `data` owned by `owner` (kept alive as long as the view): in-memory models.
    // `label` stands for the path in messages. Nothing is unmapped; the page hints do nothing.
    static std::shared_ptr<const MappedFile> from_memory(std::string label, std::shared_ptr<const void> owner,
                                                         const std::byte* data, std::size_t size);
    // Bytes computed on demand (a LoRA-merged tensor): `fill(out)` writes all `size` bytes. Nothing is
    // computed until they are first read: `bytes()` computes them once and keeps them, so a command
    // that never reads them (compare --delta-only of an adapter) never forms them. The page hints do
    // nothing.
    using Generator = std::function<void(std::span<std::byte> out)>;
    static std::shared_ptr<const MappedFile> generated(std::string label, std::size_t size, Generator fill);

    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::span<const std::byte> bytes() const {
        if (fill_) std::call_once(materialised_, [this] { materialise(); });
        return {data_, size_};
    }
    // Whether the bytes are computed on demand (MappedFile::generated).
    bool is_generated() const { return static_cast<bool>(fill_); }
    std::size_t size() const { return size_; }
    const std::string& path() const { return path_; }
    // The identity the file had when it was mapped; empty for in-memory views.
    const std::optional<FileIdentity>& identity() const { return identity_; }

    // Tells the kernel a byte range will be read soon / is no longer needed (page cache hint; it
    // keeps resident memory small when a large model is streamed matrix by matrix).
    void will_need(std::size_t offset, std::size_t length) const;
    void dont_need(std::size_t offset, std::size_t length) const;
    // Sparse reads ahead (fingerprint samples): without this a fault reads `read_ahead_kb` around it
    // (8 MB on some disks), so sampling every MiB would read the whole file. `false` restores the
    // default readahead for the sequential reads of tensors.
    void expect_random_access(std::size_t offset, std::size_t length, bool random) const;

private:
    MappedFile(std::string path, const std::byte* data, std::size_t size);
    void materialise() const;
    std::string path_;
    mutable const std::byte* data_ = nullptr;  // set once by materialise() for generated files
    std::size_t size_ = 0;
    std::shared_ptr<const void> owner_;  // set for from_memory views
    std::optional<FileIdentity> identity_;
    Generator fill_;                          // set for generated files
    mutable std::once_flag materialised_;     // guards the one materialisation of `storage_`
    mutable std::vector<std::byte> storage_;  // a generated file's bytes once materialised
    int guard_slot_ = -1;                     // this mapping's entry in the SIGBUS guard, if any
};

// A file truncated (or re-saved through O_TRUNC) while it is mapped turns reads past its new end into
// SIGBUS. Every mapping is registered with a guard whose handler maps a page of zeros over the faulting
// page and marks the file, so the read goes on and the process survives; the code that consumes the
// bytes then calls this (a task before its results are stored, a writer before it renames its output
// into place, content hashing before it records ids) and the run ends as bad input, exit 2, one line
// naming the file, with nothing stored or half-written.
void check_mapped_inputs_intact();

}  // namespace diffract
