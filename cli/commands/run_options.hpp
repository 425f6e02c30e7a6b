// The options every computing command shares: threads, memory, store, device, progress, and the one
// selection grammar (--roles, --layers, --match, --exclude).
#pragma once

#include <CLI/CLI.hpp>

#include "diffract/run/options.hpp"

namespace diffract::cli {

void add_run_options(CLI::App* sub, run::RunOptionText& args);
void add_selection_options(CLI::App* sub, run::RunOptionText& args);
// The options of the commands that run as MPI ranks (analyze, compare).
void add_distribution_options(CLI::App* sub, run::RunOptionText& args);

// Checks a --seed that is stored unsigned: a decimal integer in 0..2^64-1 (CLI11 itself would wrap
// "-1" and saturate larger values, so two different seeds on the command line gave the same output).
CLI::Validator unsigned_seed();

}  // namespace diffract::cli
