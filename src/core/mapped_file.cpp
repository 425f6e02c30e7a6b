#include "diffract/core/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "diffract/core/error.hpp"

namespace diffract {
namespace {

// madvise wants page-aligned starts.
void advise(const std::byte* base, std::size_t size, std::size_t offset, std::size_t length, int advice) {
    if (size == 0 || offset >= size) return;
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t start = offset / page * page;
    const std::size_t end = std::min(size, offset + length);
    madvise(const_cast<std::byte*>(base) + start, end - start, advice);
}

FileIdentity identity_of(const struct stat& st) {
    auto ns = [](const timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; };
    return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
            static_cast<std::uint64_t>(st.st_size), ns(st.st_mtim), ns(st.st_ctim)};
}

}  // namespace

std::optional<FileIdentity> file_identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    return identity_of(st);
}

MappedFile::MappedFile(std::string path, const std::byte* data, std::size_t size)
    : path_(std::move(path)), data_(data), size_(size) {}

MappedFile::~MappedFile() {
    if (!owner_ && data_ != nullptr && size_ > 0) munmap(const_cast<std::byte*>(data_), size_);
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below as not a regular file).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw_input_error(path, "", std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        throw_input_error(path, "", std::string("cannot stat: ") + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw_input_error(path, "", "not a regular file");
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    const std::byte* data = nullptr;
    if (size > 0) {
        void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            throw_input_error(path, "", std::string("cannot map: ") + std::strerror(err));
        }
        data = static_cast<const std::byte*>(p);
    }
    ::close(fd);  // the mapping keeps the file referenced
    auto f = std::shared_ptr<MappedFile>(new MappedFile(path, data, size));
    f->identity_ = identity_of(st);
    return f;
}

std::shared_ptr<const MappedFile> MappedFile::from_memory(std::string label,
                                                          std::shared_ptr<const void> owner,
                                                          const std::byte* data, std::size_t size) {
    auto f = std::shared_ptr<MappedFile>(new MappedFile(std::move(label), data, size));
    f->owner_ = owner ? std::move(owner) : std::make_shared<int>(0);  // never null: marks "not mapped"
    return f;
}

std::shared_ptr<const MappedFile> MappedFile::generated(std::string label, std::size_t size, Generator fill) {
    auto f = std::shared_ptr<MappedFile>(new MappedFile(std::move(label), nullptr, size));
    f->owner_ = std::make_shared<int>(0);  // not mapped: no munmap, no page hints
    f->fill_ = std::move(fill);
    return f;
}

void MappedFile::materialise() const {
    storage_.resize(size_);
    fill_(storage_);
    data_ = storage_.data();
}

void MappedFile::will_need(std::size_t offset, std::size_t length) const {
    if (owner_) return;  // caller-owned memory: no page hints (MADV_DONTNEED would zero anonymous pages)
    advise(data_, size_, offset, length, MADV_WILLNEED);
}

void MappedFile::expect_random_access(std::size_t offset, std::size_t length, bool random) const {
    if (owner_) return;
    advise(data_, size_, offset, length, random ? MADV_RANDOM : MADV_NORMAL);
}

void MappedFile::dont_need(std::size_t offset, std::size_t length) const {
    if (owner_) return;
    advise(data_, size_, offset, length, MADV_DONTNEED);
}

}  // namespace diffract
