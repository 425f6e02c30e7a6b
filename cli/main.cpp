// diffract: the command-line tool. This file is the single catch site: an InputError prints one
// line and exits 2, any other exception exits 1.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands/commands.hpp"
#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"
#include "diffract/linalg/blas_info.hpp"
#include "diffract/run/distributed.hpp"
#include "usage_errors.hpp"

namespace {

// SIGINT/SIGTERM: the first asks the run to stop between matrices or tensors, so that every
// temporary output is removed on the way out (exit 130); a second one ends the process at once (its
// temporaries are then removed by the next run that writes the same output).
extern "C" void on_stop_signal(int sig) {
    if (diffract::cancel_requested()) {
        std::signal(sig, SIG_DFL);
        std::raise(sig);
        return;
    }
    diffract::request_cancel();
}

int run(int argc, char** argv) {
    CLI::App app{"diffract: spectral analysis of neural-network checkpoints"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Expand all help");
    app.set_version_flag("--version", [] {
        return fmt::format("diffract {}\nBLAS: {}", DIFFRACT_VERSION, diffract::linalg::blas_description());
    });
    diffract::cli::register_commands(app);
    app.get_subcommand("analyze")->alias("analyse");
    try {
        if (const auto mistyped = diffract::cli::unknown_command(app, argc, argv)) {
            std::fprintf(stderr, "diffract: error: %s\n", diffract::one_line(*mistyped).c_str());
            return 2;
        }
        app.parse(argc, argv);
        return diffract::cli::run_selected(app);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --help-all, --version
        // A bad option is bad input: one line, like every other (CLI11's own message is two). An option
        // the command does not have is named as such (CLI11 reports what it did with the tokens).
        const auto foreign = diffract::cli::foreign_option(app, argc, argv);
        std::fprintf(stderr, "diffract: error: %s (see --help)\n",
                     diffract::one_line(foreign ? *foreign : std::string(e.what())).c_str());
        return 2;
    } catch (const diffract::Cancelled&) {
        // Under mpirun every rank is signalled (also when another rank died): rank 0 speaks for them.
        if (diffract::run::distributed().is_root())
            std::fprintf(stderr, "diffract: interrupted; nothing was left half-written\n");
        return 130;
    } catch (const diffract::run::RankStop&) {
        return 2;  // rank 0 prints why
    } catch (const diffract::InputError& e) {
        // Under MPI a worker's own failure (an input missing on its host) names the rank and host.
        const auto& world = diffract::run::distributed();
        const std::string where =
            world.size > 1 && !world.is_root()
                ? "rank " + std::to_string(world.rank) + " on host " + diffract::run::host_name() + ": "
                : "";
        std::fprintf(stderr, "diffract: error: %s%s\n", where.c_str(), diffract::one_line(e.what()).c_str());
        return 2;
    } catch (const std::system_error& e) {
        // A failure the machine or the user's paths cause (a full disk or quota, too many open files, a
        // path through a file, no permission, a closed stderr) is bad input, not a bug: exit 2 with the
        // path(s) the library's message names.
        if (diffract::is_environment_error(e.code())) {
            std::fprintf(stderr, "diffract: error: %s\n", diffract::one_line(e.what()).c_str());
            return 2;
        }
        std::fprintf(stderr, "diffract: internal error: %s\n", diffract::one_line(e.what()).c_str());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "diffract: internal error: %s\n", diffract::one_line(e.what()).c_str());
        return 1;
    }
}

// A standard descriptor the caller closed (`>&-`) is held by /dev/null opened read-only: no file the run
// opens takes its number (a store or an output written through descriptor 1), and every write to it
// still fails, which finish_stdout reports.
void hold_closed_standard_descriptors() {
    for (int fd = 0; fd <= 2; ++fd)
        if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            const int held = ::open("/dev/null", O_RDONLY);
            if (held >= 0 && held != fd) {
                ::dup2(held, fd);
                ::close(held);
            }
        }
}

// Every command's result on stdout is checked once, here: a write that failed (a full disk, /dev/full,
// a closed stdout) is one line on stderr and exit 2, never exit 0 with the result missing.
int finish_stdout(int rc) {
    if (rc != 0) return rc;  // the failure was said already (in one line)
    std::cout.flush();
    errno = 0;
    const bool flushed = std::fflush(stdout) == 0;
    const int err = errno;
    if (flushed && !std::ferror(stdout) && std::cout.good()) return rc;
    std::fprintf(stderr, "diffract: error: cannot write the output to standard output: %s\n",
                 err != 0 ? std::strerror(err) : "write failed");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    hold_closed_standard_descriptors();
    diffract::run::distributed_init(&argc, &argv);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    const int rc = finish_stdout(run(argc, argv));
    // A failed rank must not leave the others waiting in a collective.
    if (rc != 0 && diffract::run::distributed().size > 1) diffract::run::distributed_abort(rc);
    diffract::run::distributed_finalize();
    return rc;
}
