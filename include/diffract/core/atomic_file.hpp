// Writing a file completely or not at all: the contents go to a temporary sibling which is
// renamed over the target only after a successful flush.
#pragma once

#include <string>

namespace diffract {

void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace diffract
