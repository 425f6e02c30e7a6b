// The options every computing command shares: threads, memory, store, device, progress, and the one
// selection grammar (--roles, --layers, --match, --exclude).
#pragma once

#include <CLI/CLI.hpp>

#include "diffract/run/options.hpp"

namespace diffract::cli {

void add_run_options(CLI::App* sub, run::RunOptionText& args);
void add_selection_options(CLI::App* sub, run::RunOptionText& args);

}  // namespace diffract::cli
