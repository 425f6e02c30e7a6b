// A weight file being written inside a temporary output directory: every byte checked, flushed and
// synced before the directory is renamed into place (core/atomic_file.hpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace diffract::formats {

class OutputFile {
public:
    explicit OutputFile(std::string path);  // created, truncated; InputError naming the path
    void write(const void* data, std::size_t n);
    void write_zeros(std::size_t n);
    std::uint64_t position() const { return written_; }
    void finish();  // flush, fsync and close; InputError ("disk full?") on failure

private:
    struct Closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    std::string path_;
    std::unique_ptr<std::FILE, Closer> file_;
    std::uint64_t written_ = 0;
};

}  // namespace diffract::formats
