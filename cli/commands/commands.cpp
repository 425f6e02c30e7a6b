#include "commands/commands.hpp"

#include <map>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/run/distributed.hpp"

namespace diffract::cli {
namespace {
std::map<CLI::App*, Runner>& runners() {
    static std::map<CLI::App*, Runner> r;
    return r;
}
}  // namespace

void on_run(CLI::App* sub, Runner run) { runners()[sub] = std::move(run); }

void register_commands(CLI::App& app) {
    add_inspect(app);
    add_generate(app);
    add_analyze(app);
    add_metrics(app);
    add_store(app);
    add_export(app);
    add_compare(app);
    add_report(app);
    add_edit(app);
    add_sweep(app);
    add_watch(app);
    add_completion(app);
}

int run_selected(CLI::App& app) {
    run::check_launch();  // not N copies of the whole work
    if (run::distributed().size > 1)
        for (auto* sub : app.get_subcommands())
            if (sub->get_name() != "analyze" && sub->get_name() != "compare")
                throw InputError(
                    fmt::format("under MPI only analyze and compare share their work among ranks: run "
                                "`diffract {}` as one process (it uses every core of the machine)",
                                sub->get_name()));
    // The deepest selected subcommand with a runner (e.g. `store erase`).
    for (auto* sub : app.get_subcommands()) {
        if (!sub->get_subcommands().empty()) return run_selected(*sub);
        auto it = runners().find(sub);
        if (it != runners().end()) return it->second();
    }
    throw CLI::CallForHelp();
}

}  // namespace diffract::cli
