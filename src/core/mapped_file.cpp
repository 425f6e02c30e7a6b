#include "diffract/core/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

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

// The SIGBUS guard (see the header). The handler may only touch lock-free state: each slot is one
// mapping's address range, claimed with a CAS and cleared when the mapping goes away.
struct GuardSlot {
    std::atomic<bool> claimed{false};
    std::atomic<std::uintptr_t> begin{0}, end{0};
    std::atomic<bool> faulted{false};
};
constexpr int kGuardSlots = 8192;  // mappings alive at once; beyond that a file is mapped unguarded
std::array<GuardSlot, kGuardSlots> g_guard;
std::uintptr_t g_page_size = 4096;
std::mutex g_guard_paths_mutex;  // the paths are for messages only: the handler never reads them
std::array<std::string, kGuardSlots> g_guard_paths;
std::string g_unreported_fault;  // the path of a faulted mapping destroyed before its check

// A fault is reported once: a long-lived process (Python) goes on with its next call.
[[noreturn]] void throw_changed_while_read(const std::string& path) {
    throw_input_error(path, "",
                      "the file changed while being read (truncated or re-saved in place: a read went past "
                      "its new end); nothing computed from it was kept");
}
struct sigaction g_previous_bus_action {};

extern "C" void on_bus_error(int sig, siginfo_t* info, void* context) {
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (auto& slot : g_guard) {
        const auto b = slot.begin.load(std::memory_order_acquire);
        if (b == 0 || addr < b || addr >= slot.end.load(std::memory_order_acquire)) continue;
        // Zeros in place of the page that is no longer backed by the file: the read completes.
        void* page = reinterpret_cast<void*>(addr & ~(g_page_size - 1));
        if (mmap(page, g_page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
            MAP_FAILED) {
            slot.faulted.store(true, std::memory_order_release);
            return;
        }
        break;
    }
    // Not a read of one of our mappings: whatever was installed before us handles it.
    if (g_previous_bus_action.sa_flags & SA_SIGINFO) {
        if (g_previous_bus_action.sa_sigaction) return g_previous_bus_action.sa_sigaction(sig, info, context);
    } else if (g_previous_bus_action.sa_handler != SIG_DFL && g_previous_bus_action.sa_handler != SIG_IGN) {
        return g_previous_bus_action.sa_handler(sig);
    }
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

int guard_mapping(const std::string& path, const std::byte* data, std::size_t size) {
    static std::once_flag installed;
    std::call_once(installed, [] {
        g_page_size = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
        struct sigaction sa {};
        sa.sa_sigaction = on_bus_error;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &g_previous_bus_action);
    });
    for (int i = 0; i < kGuardSlots; ++i) {
        bool expected = false;
        if (!g_guard[i].claimed.compare_exchange_strong(expected, true)) continue;
        g_guard[i].faulted.store(false);
        {
            std::lock_guard lock(g_guard_paths_mutex);
            g_guard_paths[static_cast<std::size_t>(i)] = path;
        }
        g_guard[i].end.store(reinterpret_cast<std::uintptr_t>(data) + size, std::memory_order_release);
        g_guard[i].begin.store(reinterpret_cast<std::uintptr_t>(data), std::memory_order_release);
        return i;
    }
    return -1;
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
    if (guard_slot_ >= 0) {
        auto& slot = g_guard[static_cast<std::size_t>(guard_slot_)];
        slot.begin.store(0, std::memory_order_release);
        slot.end.store(0, std::memory_order_release);
        {
            // A fault nobody has reported yet outlives the mapping: the next check still sees it.
            std::lock_guard lock(g_guard_paths_mutex);
            if (slot.faulted.exchange(false) && g_unreported_fault.empty()) g_unreported_fault = path_;
        }
        slot.claimed.store(false, std::memory_order_release);
    }
    if (!owner_ && data_ != nullptr && size_ > 0) munmap(const_cast<std::byte*>(data_), size_);
}

void check_mapped_inputs_intact() {
    std::string path;
    {
        std::lock_guard lock(g_guard_paths_mutex);
        path = std::exchange(g_unreported_fault, std::string());
        for (std::size_t i = 0; i < kGuardSlots && path.empty(); ++i)
            if (g_guard[i].faulted.exchange(false)) path = g_guard_paths[i];
    }
    if (!path.empty()) throw_changed_while_read(path);
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
    if (size > 0) f->guard_slot_ = guard_mapping(path, data, size);
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
