// Writing a file or a directory completely or not at all: the contents go to a temporary sibling
// (".NAME.tmp-PID-RANDOM") which is renamed over the target only after every byte was written and
// flushed. A temporary left by a killed run (its PID no longer alive) is removed by the next run that
// writes the same target; an interrupted run (SIGINT/SIGTERM) removes its own.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace diffract {

// Writes `contents` to `path` (not atomically: for files inside a temporary directory), checking every
// byte and the flush. Throws InputError naming the path ("disk full?") on failure.
void write_file_fully(const std::string& path, const std::string& contents);

void write_file_atomically(const std::string& path, const std::string& contents);

// Appends `text` to `path` (created if missing) and flushes it to disk: journals that a resumed run
// reads back. Throws InputError naming the path when a byte cannot be written.
void append_to_file(const std::string& path, const std::string& text);

enum class ExistingOutput {
    refuse,   // an existing target is an error (edited checkpoints, generated families)
    replace,  // an existing result directory is replaced as a whole, if it holds only `result_files`
};

// `fill(tmp_dir)` populates a temporary sibling of `out_dir`, which is then renamed into place (for
// `replace`, atomically exchanged with the old directory, which is then removed). A directory that
// holds anything but `result_files` is never replaced. Throws InputError naming the path.
void write_directory_atomically(const std::string& out_dir,
                                const std::function<void(const std::string& tmp_dir)>& fill,
                                ExistingOutput existing = ExistingOutput::refuse,
                                const std::vector<std::string>& result_files = {});

// Removes the temporaries of `target` left by runs that are no longer alive.
void remove_stale_temporaries(const std::string& target);

}  // namespace diffract
