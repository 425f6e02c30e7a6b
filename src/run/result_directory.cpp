#include "diffract/run/result_directory.hpp"

#include <filesystem>
#include <vector>

#include "diffract/core/atomic_file.hpp"

namespace diffract::run {

void write_result_directory(const std::string& out_dir, const std::map<std::string, std::string>& files) {
    static const std::vector<std::string> kResultFiles = {
        "metrics.csv",       "aggregates.csv",  "compare.csv", "heads.csv",  "skipped.csv",
        "weightwatcher.csv", "checkpoints.csv", "trends.csv",  "alerts.csv", "watch.json"};
    write_directory_atomically(
        out_dir,
        [&](const std::string& tmp) {
            for (const auto& [name, contents] : files)
                write_file_fully((std::filesystem::path(tmp) / name).string(), contents);
        },
        ExistingOutput::replace, kResultFiles);
}

}  // namespace diffract::run
