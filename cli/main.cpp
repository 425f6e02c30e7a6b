// diffract: the command-line tool. This file is the single catch site: an InputError prints one
// line and exits 2, any other exception exits 1.
#include <cstdio>
#include <exception>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands/commands.hpp"
#include "diffract/core/distributed.hpp"
#include "diffract/core/error.hpp"

namespace {

int run(int argc, char** argv) {
    CLI::App app{"diffract: spectral analysis of neural-network checkpoints"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Expand all help");
    diffract::cli::register_commands(app);
    try {
        app.parse(argc, argv);
        return diffract::cli::run_selected(app);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    } catch (const diffract::InputError& e) {
        std::fprintf(stderr, "diffract: error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "diffract: internal error: %s\n", e.what());
        return 1;
    }
}

}  // namespace

int main(int argc, char** argv) {
    diffract::distributed_init(&argc, &argv);
    const int rc = run(argc, argv);
    // A failed rank must not leave the others waiting in a collective.
    if (rc != 0 && diffract::distributed().size > 1) diffract::distributed_abort(rc);
    diffract::distributed_finalize();
    return rc;
}
