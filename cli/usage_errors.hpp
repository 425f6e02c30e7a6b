// Errors in the shape of a command line (a mistyped command, an option the command does not have),
// worded for the mistake a user made rather than for the parser's state: CLI11 answers a stray
// `--store X` after two positionals with "models: At Most 2 required but received 3".
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace diffract::cli {

// When argv names a command that does not exist (`diffract anaylze`, `diffract edit trunc`): the line
// to print, with the closest command ("did you mean 'analyze'?") or the list of commands.
std::optional<std::string> unknown_command(CLI::App& app, int argc, char** argv);

// When argv gives an option (`--name`) that the command it names does not have: the line to print,
// naming the option and the command, why when the option belongs to other commands, and the valid
// options.
std::optional<std::string> foreign_option(CLI::App& app, int argc, char** argv);

}  // namespace diffract::cli
