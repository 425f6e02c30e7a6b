// The options every computing command shares: threads, memory, store, device, progress, and the one
// selection grammar (--roles, --layers, --match, --exclude).
#pragma once

#include <CLI/CLI.hpp>

#include "diffract/analysis/analyze.hpp"

namespace diffract::cli {

struct RunArgs {
    int threads = 0;
    std::string max_memory;
    std::string store;
    std::string device = "cpu";
    bool quiet = false;
    std::string roles, layers, match, exclude;
};

void add_run_options(CLI::App* sub, RunArgs& args);
void add_selection_options(CLI::App* sub, RunArgs& args);
analysis::RunOptions to_run_options(const RunArgs& args);

}  // namespace diffract::cli
