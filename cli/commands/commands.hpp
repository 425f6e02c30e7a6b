// The subcommands. Each file in this folder adds one subcommand to the app and registers the
// function that runs it; main() runs whichever was selected.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace diffract::cli {

using Runner = std::function<int()>;

// Remembers `run` as the action of `sub`.
void on_run(CLI::App* sub, Runner run);

void register_commands(CLI::App& app);
int run_selected(CLI::App& app);

void add_inspect(CLI::App& app);
void add_generate(CLI::App& app);
void add_analyze(CLI::App& app);
void add_metrics(CLI::App& app);
void add_store(CLI::App& app);
void add_export(CLI::App& app);
void add_compare(CLI::App& app);
void add_report(CLI::App& app);
void add_edit(CLI::App& app);
void add_sweep(CLI::App& app);
void add_watch(CLI::App& app);
void add_completion(CLI::App& app);  // last: it lists the commands registered before it

}  // namespace diffract::cli
