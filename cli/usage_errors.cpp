#include "usage_errors.hpp"

#include <algorithm>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "diffract/core/spelling.hpp"

namespace diffract::cli {
namespace {

std::vector<CLI::App*> subcommands(CLI::App* app) {
    return app->get_subcommands([](CLI::App*) { return true; });
}

// The commands argv names, from the top: {app, analyze} or {app, edit, truncate}.
std::vector<CLI::App*> command_path(CLI::App& app, int argc, char** argv, int& next) {
    std::vector<CLI::App*> path{&app};
    for (next = 1; next < argc; ++next) {
        const std::string token = argv[next];
        CLI::App* found = nullptr;
        for (auto* sub : subcommands(path.back()))
            if (sub->check_name(token)) found = sub;
        if (!found) break;
        path.push_back(found);
    }
    return path;
}

std::string command_name(const std::vector<CLI::App*>& path) {
    std::string name = "diffract";
    for (std::size_t i = 1; i < path.size(); ++i) name += " " + path[i]->get_name();
    return name;
}

std::string long_name(const CLI::Option* o) {
    const auto& names = o->get_lnames();
    return names.empty() ? std::string() : "--" + names.front();
}

}  // namespace

std::optional<std::string> unknown_command(CLI::App& app, int argc, char** argv) {
    int next = 0;
    const auto path = command_path(app, argc, argv, next);
    const auto subs = subcommands(path.back());
    if (subs.empty() || next >= argc) return std::nullopt;
    const std::string token = argv[next];
    if (token.starts_with("-")) return std::nullopt;
    std::vector<std::string> names;
    for (auto* sub : subs) names.push_back(sub->get_name());
    const auto best = closest_spelling(token, names);
    const auto where = command_name(path);
    if (!best.empty())
        return fmt::format("'{}' is not a command of {}; did you mean '{} {}'?", token, where, where, best);
    return fmt::format("'{}' is not a command of {} (commands: {})", token, where, fmt::join(names, ", "));
}

std::optional<std::string> foreign_option(CLI::App& app, int argc, char** argv) {
    int next = 0;
    const auto path = command_path(app, argc, argv, next);
    if (path.size() < 2) return std::nullopt;
    auto* command = path.back();
    for (int i = next; i < argc; ++i) {
        std::string token = argv[i];
        if (token == "--") break;
        if (!token.starts_with("--") || token.size() < 3) continue;
        if (const auto eq = token.find('='); eq != std::string::npos) token.resize(eq);
        if (command->get_option_no_throw(token) || app.get_option_no_throw(token)) continue;
        // Where the option does exist, for the reason a user gave it here.
        std::vector<std::string> elsewhere;
        std::vector<std::pair<CLI::App*, std::string>> stack{{&app, "diffract"}};
        while (!stack.empty()) {
            auto [a, name] = stack.back();
            stack.pop_back();
            for (auto* sub : subcommands(a)) {
                const auto sub_name = name + " " + sub->get_name();
                if (sub->get_option_no_throw(token)) elsewhere.push_back(sub_name);
                stack.emplace_back(sub, sub_name);
            }
        }
        std::string why;
        const bool run_option = token == "--store" || token == "--threads" || token == "--max-memory";
        if (path.size() == 3 && path[1]->get_name() == "edit" && run_option)
            why = " (streaming edits read one tensor at a time: they use no store, threads or memory budget)";
        else if (!elsewhere.empty())
            why = fmt::format(" (it is an option of {}{})",
                              fmt::join(elsewhere.begin(),
                                        elsewhere.begin() + std::min<std::size_t>(3, elsewhere.size()), ", "),
                              elsewhere.size() > 3 ? ", ..." : "");
        std::vector<std::string> valid;
        for (const auto* o : command->get_options())
            if (const auto n = long_name(o); !n.empty() && n != "--help" && n != "--help-all")
                valid.push_back(n);
        return fmt::format("{} is not an option of {}{}; its options: {}", token, command_name(path), why,
                           fmt::join(valid, " "));
    }
    return std::nullopt;
}

}  // namespace diffract::cli
