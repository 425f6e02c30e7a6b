// A job's result directory (metrics.csv, compare.csv, ...), written as a whole.
#pragma once

#include <map>
#include <string>

namespace diffract::run {

// Writes the result directory `out_dir` with `files` (name -> contents) as a whole: written to a
// temporary sibling, then exchanged with the previous result directory, so a reader or a kill never
// sees a mix of two runs. An existing directory holding other files is refused, never replaced.
void write_result_directory(const std::string& out_dir, const std::map<std::string, std::string>& files);

}  // namespace diffract::run
