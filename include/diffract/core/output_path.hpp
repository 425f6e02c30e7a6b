// One rule for where any command may write: an output never is, contains or lies inside one of the
// run's inputs or the results store. Every command checks its outputs with it before it computes or
// writes anything, so a mistyped --out costs a message, not a model or a store.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace diffract {

// The absolute path that the kernel opens for `path`: symbolic links resolved as far as the path
// exists, each '..' applied to what precedes it once resolved (a link's target, not the link's
// directory), the missing rest taken lexically. Writers and check_output_path both use it, so a
// path is checked where it is written ("link/../x" is "x" beside the link's target).
std::filesystem::path physical_path(const std::string& path);

// Throws InputError naming `out` (and the input it collides with) when `out` is, contains or lies
// inside any of `protected_paths` (files or directories; symbolic links resolved, missing paths
// compared lexically). `flag` names the option in the message ("--out").
void check_output_path(const std::string& out, const std::vector<std::string>& protected_paths,
                       const std::string& flag = "--out");

// "a regular file", "a directory", "a FIFO", "a character device", ...: what a path is, in messages.
std::string_view file_type_name(std::filesystem::file_type type);

// What an output path is written as.
enum class OutputKind { file, directory };

// Throws InputError naming `out` when it exists (links followed) and is not a regular file (`file`) or
// not a directory (`directory`): an output never replaces a device (/dev/null, /dev/full), a FIFO, a
// socket, nor a directory with a file or a file with a directory.
void check_output_kind(const std::string& out, OutputKind kind, const std::string& flag = "--out");

}  // namespace diffract
