// The central directory of a zip archive (PKWARE APPNOTE 4.3.12-4.3.16, zip64 4.3.14-4.3.15, 4.5.3),
// as much of it as an archive of uncompressed entries needs: where each entry's data is and how big.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/formats/pytorch.hpp"

namespace diffract::formats {
namespace {

constexpr std::uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEnd = 0x06054b50,
                        kEnd64 = 0x06064b50, kEnd64Locator = 0x07064b50;
constexpr std::size_t kEndSize = 22, kLocatorSize = 20, kEnd64Size = 56, kCentralSize = 46, kLocalSize = 30;

// Little-endian reads at a position the caller has bounds-checked.
std::uint64_t le(std::span<const std::byte> b, std::uint64_t at, int n) {
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(b[at + i]);
    return v;
}

bool fits(std::uint64_t at, std::uint64_t n, std::uint64_t size) { return at <= size && n <= size - at; }

struct End {
    std::uint64_t entries = 0, cd_size = 0, cd_offset = 0;
};

End read_end(std::span<const std::byte> f, const std::string& label) {
    const std::uint64_t size = f.size();
    if (size < kEndSize) throw_input_error(label, "", fmt::format("zip archive too short ({} bytes)", size));
    // The record is the last thing in the file but for a comment of up to 65535 bytes.
    std::uint64_t at = size - kEndSize;
    const std::uint64_t lowest = size - kEndSize > 65535 ? size - kEndSize - 65535 : 0;
    for (;; --at) {
        if (le(f, at, 4) == kEnd && at + kEndSize + le(f, at + 20, 2) == size) break;
        if (at == lowest)
            throw_input_error(label, "", "no zip end-of-central-directory record (truncated archive?)");
    }
    if (le(f, at + 4, 2) != 0 || le(f, at + 6, 2) != 0)
        throw_input_error(label, "", "multi-disk zip archives are not supported");
    End e{le(f, at + 10, 2), le(f, at + 12, 4), le(f, at + 16, 4)};
    if (le(f, at + 8, 2) != e.entries)
        throw_input_error(label, "", "zip end record: entries on this disk differ from the total");
    // Zip64 records when a field overflowed, or when a writer added them anyway (a locator just before).
    const bool zip64 = e.entries == 0xFFFF || e.cd_size == 0xFFFFFFFF || e.cd_offset == 0xFFFFFFFF ||
                       (at >= kLocatorSize && le(f, at - kLocatorSize, 4) == kEnd64Locator);
    if (!zip64) {
        if (!fits(e.cd_offset, e.cd_size, at) || e.cd_offset + e.cd_size != at)
            throw_input_error(
                label, "",
                fmt::format("zip central directory [{}, +{}) does not end at the end record ({})",
                            e.cd_offset, e.cd_size, at));
        return e;
    }
    if (at < kLocatorSize || le(f, at - kLocatorSize, 4) != kEnd64Locator)
        throw_input_error(label, "", "zip end record asks for zip64 but there is no zip64 locator");
    const std::uint64_t loc = at - kLocatorSize;
    if (le(f, loc + 4, 4) != 0 || le(f, loc + 16, 4) > 1)
        throw_input_error(label, "", "multi-disk zip archives are not supported");
    const std::uint64_t rec = le(f, loc + 8, 8);
    if (!fits(rec, kEnd64Size, loc) || le(f, rec, 4) != kEnd64)
        throw_input_error(label, "",
                          fmt::format("zip64 end record offset {} is not a zip64 end record", rec));
    if (le(f, rec + 16, 4) != 0 || le(f, rec + 20, 4) != 0)
        throw_input_error(label, "", "multi-disk zip archives are not supported");
    e.entries = le(f, rec + 32, 8);
    if (le(f, rec + 24, 8) != e.entries)
        throw_input_error(label, "", "zip64 end record: entries on this disk differ from the total");
    e.cd_size = le(f, rec + 40, 8);
    e.cd_offset = le(f, rec + 48, 8);
    if (!fits(e.cd_offset, e.cd_size, rec) || e.cd_offset + e.cd_size != rec)
        throw_input_error(
            label, "",
            fmt::format("zip64 central directory [{}, +{}) does not end at the zip64 end record ({})",
                        e.cd_offset, e.cd_size, rec));
    return e;
}

void check_name(const std::string& name, const std::string& label) {
    auto bad = [&](const char* what) {
        throw_input_error(label, "", fmt::format("zip entry name '{}' {}", name, what));
    };
    if (name.empty()) bad("is empty");
    if (name.find('\0') != std::string::npos) bad("holds a NUL byte");
    if (name.front() == '/' || name.find('\\') != std::string::npos) bad("is not a relative path");
    std::size_t start = 0;
    while (start <= name.size()) {
        const auto end = std::min(name.find('/', start), name.size());
        if (name.compare(start, end - start, "..") == 0) bad("leaves the archive ('..')");
        start = end + 1;
    }
}

}  // namespace

std::vector<ZipEntry> parse_zip_directory(std::span<const std::byte> f, const std::string& label) {
    const End end = read_end(f, label);
    if (end.entries > end.cd_size / kCentralSize)
        throw_input_error(
            label, "",
            fmt::format("zip directory of {} bytes cannot hold {} entries", end.cd_size, end.entries));
    std::vector<ZipEntry> entries;
    entries.reserve(end.entries);
    std::set<std::string> names;
    std::uint64_t at = end.cd_offset;
    const std::uint64_t cd_end = end.cd_offset + end.cd_size;
    for (std::uint64_t i = 0; i < end.entries; ++i) {
        if (!fits(at, kCentralSize, cd_end) || le(f, at, 4) != kCentralHeader)
            throw_input_error(label, "", fmt::format("zip central directory entry {} is malformed", i));
        const auto flags = le(f, at + 8, 2);
        ZipEntry e;
        e.method = static_cast<std::uint16_t>(le(f, at + 10, 2));
        e.crc32 = static_cast<std::uint32_t>(le(f, at + 16, 4));
        e.compressed_size = le(f, at + 20, 4);
        e.size = le(f, at + 24, 4);
        const auto name_len = le(f, at + 28, 2), extra_len = le(f, at + 30, 2),
                   comment_len = le(f, at + 32, 2);
        const auto disk = le(f, at + 34, 2);
        e.local_header_offset = le(f, at + 42, 4);
        if (!fits(at + kCentralSize, name_len + extra_len + comment_len, cd_end))
            throw_input_error(label, "",
                              fmt::format("zip central directory entry {} runs past the directory", i));
        e.name.assign(reinterpret_cast<const char*>(f.data() + at + kCentralSize), name_len);
        check_name(e.name, label);
        if (!names.insert(e.name).second)
            throw_input_error(label, "", fmt::format("zip entry '{}' appears twice", e.name));
        if (flags & 1) throw_input_error(label, "", fmt::format("zip entry '{}' is encrypted", e.name));
        // zip64 extended information: the 32-bit fields that overflowed, in this order.
        std::uint64_t x = at + kCentralSize + name_len;
        const std::uint64_t x_end = x + extra_len;
        while (x_end - x >= 4) {
            const auto id = le(f, x, 2), len = le(f, x + 2, 2);
            if (len > x_end - x - 4)
                throw_input_error(label, "",
                                  fmt::format("zip entry '{}': extra field runs past its end", e.name));
            if (id == 0x0001) {
                std::uint64_t p = x + 4;
                auto take = [&](std::uint64_t& field) {
                    if (p + 8 > x + 4 + len)
                        throw_input_error(label, "",
                                          fmt::format("zip entry '{}': zip64 field too short", e.name));
                    field = le(f, p, 8);
                    p += 8;
                };
                if (e.size == 0xFFFFFFFF) take(e.size);
                if (e.compressed_size == 0xFFFFFFFF) take(e.compressed_size);
                if (e.local_header_offset == 0xFFFFFFFF) take(e.local_header_offset);
            }
            x += 4 + len;
        }
        if (disk != 0 && disk != 0xFFFF)
            throw_input_error(label, "", "multi-disk zip archives are not supported");
        // The local header repeats the name; the data follows it and its own extra field.
        const std::uint64_t lh = e.local_header_offset;
        if (!fits(lh, kLocalSize, end.cd_offset) || le(f, lh, 4) != kLocalHeader)
            throw_input_error(label, "",
                              fmt::format("zip entry '{}': no local header at offset {}", e.name, lh));
        const auto local_name = le(f, lh + 26, 2), local_extra = le(f, lh + 28, 2);
        if (local_name != name_len || !fits(lh + kLocalSize, local_name + local_extra, end.cd_offset) ||
            std::string_view(reinterpret_cast<const char*>(f.data() + lh + kLocalSize), local_name) != e.name)
            throw_input_error(
                label, "", fmt::format("zip entry '{}': local header does not match the directory", e.name));
        if (le(f, lh + 8, 2) != e.method)
            throw_input_error(
                label, "",
                fmt::format("zip entry '{}': local header's method differs from the directory's", e.name));
        e.data_offset = lh + kLocalSize + local_name + local_extra;
        if (!fits(e.data_offset, e.compressed_size, end.cd_offset))
            throw_input_error(
                label, "",
                fmt::format("zip entry '{}': data [{}, +{}) runs past the entries' area ({} bytes)", e.name,
                            e.data_offset, e.compressed_size, end.cd_offset));
        if (e.method == 0 && e.compressed_size != e.size)
            throw_input_error(
                label, "",
                fmt::format("zip entry '{}' is stored but its sizes differ (expected {}, found {})", e.name,
                            e.size, e.compressed_size));
        entries.push_back(std::move(e));
        at += kCentralSize + name_len + extra_len + comment_len;
    }
    if (at != cd_end)
        throw_input_error(
            label, "", fmt::format("zip central directory has {} bytes after its last entry", cd_end - at));
    // Entries (local header through data) are disjoint.
    std::vector<const ZipEntry*> order;
    for (const auto& e : entries) order.push_back(&e);
    std::sort(order.begin(), order.end(),
              [](const auto* a, const auto* b) { return a->local_header_offset < b->local_header_offset; });
    for (std::size_t i = 1; i < order.size(); ++i) {
        const auto* prev = order[i - 1];
        if (order[i]->local_header_offset < prev->data_offset + prev->compressed_size)
            throw_input_error(label, "",
                              fmt::format("zip entries '{}' and '{}' overlap", prev->name, order[i]->name));
    }
    return entries;
}

}  // namespace diffract::formats
