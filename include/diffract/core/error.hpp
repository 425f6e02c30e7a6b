// Errors: two channels, one catch site.
//
// InputError is anything a user or a file can cause (bad path, corrupt header, mismatched models):
// the CLI prints its message as one line and exits 2. Anything else that escapes is an internal
// failure (exit 1). Messages follow one format so that a user can act on them:
//   <path>: tensor '<name>': <what is wrong> (expected <x>, found <y>)
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace diffract {

class InputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// "<source>: tensor '<tensor>': <what>" with the parts that are empty left out.
std::string error_context(std::string_view source, std::string_view tensor, std::string_view what);

// `text` with its control characters (a newline in a file or tensor name) shown as \xNN: every error,
// warning and note the CLI prints quotes names and file contents, and stays one line.
std::string one_line(std::string_view text);

// Whether a system error comes from the environment rather than from a bug: a full disk or quota
// (ENOSPC, EDQUOT, EFBIG), I/O errors, too many open files, missing or wrongly typed paths, permissions,
// a read-only file system, a closed pipe or descriptor. The front ends treat these as bad input.
bool is_environment_error(const std::error_code& code);

[[noreturn]] void throw_input_error(std::string_view source, std::string_view tensor, std::string_view what);

}  // namespace diffract
