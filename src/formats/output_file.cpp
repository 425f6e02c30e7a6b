#include <unistd.h>

#include <vector>

#include "diffract/core/error.hpp"
#include "formats/output_file_impl.hpp"

namespace diffract::formats {

OutputFile::OutputFile(std::string path) : path_(std::move(path)), file_(std::fopen(path_.c_str(), "wb")) {
    if (!file_) throw_input_error(path_, "", "cannot create file");
}

void OutputFile::write(const void* data, std::size_t n) {
    if (n > 0 && std::fwrite(data, 1, n, file_.get()) != n)
        throw_input_error(path_, "", "write failed (disk full?)");
    written_ += n;
}

void OutputFile::write_zeros(std::size_t n) {
    const std::vector<char> zeros(n, 0);
    write(zeros.data(), n);
}

void OutputFile::finish() {
    if (std::fflush(file_.get()) != 0 || fsync(fileno(file_.get())) != 0 || std::fclose(file_.release()) != 0)
        throw_input_error(path_, "", "write failed (disk full?)");
}

}  // namespace diffract::formats
