// diffract completion bash|zsh|fish: a shell completion script, generated from the commands as they
// are registered (so it never lists an option a command lacks): commands, subcommands, each command's
// options, and file names for everything else.
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands/commands.hpp"
#include "diffract/core/error.hpp"

namespace diffract::cli {
namespace {

struct Command {
    std::vector<std::string> subcommands, options;
};

// Every command path ("", "edit", "edit rewind", ...) with its subcommands and long options.
void collect(CLI::App* app, const std::string& path, std::map<std::string, Command>& out) {
    auto& c = out[path];
    for (const auto* o : app->get_options())
        for (const auto& n : o->get_lnames())
            if (n != "help-all") c.options.push_back("--" + n);
    for (auto* sub : app->get_subcommands([](CLI::App*) { return true; })) {
        c.subcommands.push_back(sub->get_name());
        collect(sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
    }
}

std::string bash_script(const std::map<std::string, Command>& commands) {
    std::string subs, opts;
    for (const auto& [path, c] : commands) {
        if (!c.subcommands.empty())
            subs += fmt::format("    \"{}\") echo \"{}\" ;;\n", path, fmt::join(c.subcommands, " "));
        opts += fmt::format("    \"{}\") echo \"{}\" ;;\n", path, fmt::join(c.options, " "));
    }
    return fmt::format(
        R"SH(# diffract completion for bash (and zsh through bashcompinit): eval "$(diffract completion bash)"
_diffract_subcommands() {{
  case "$1" in
{}  esac
}}
_diffract_options() {{
  case "$1" in
{}  esac
}}
_diffract() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" w subs i
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${{COMP_WORDS[i]}}"
    subs=" $(_diffract_subcommands "$path") "
    [[ "$subs" == *" $w "* ]] || break
    path="${{path:+$path }}$w"
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_diffract_options "$path")" -- "$cur"))
  else
    subs="$(_diffract_subcommands "$path")"
    if [[ -n "$subs" && $i -eq $COMP_CWORD ]]; then
      COMPREPLY=($(compgen -W "$subs" -- "$cur"))
    else
      COMPREPLY=($(compgen -f -- "$cur"))
    fi
  fi
}}
complete -o filenames -o bashdefault -F _diffract diffract
)SH",
        subs, opts);
}

std::string fish_script(const std::map<std::string, Command>& commands) {
    std::string s =
        "# diffract completion for fish: diffract completion fish | source\ncomplete -c diffract -f\n";
    for (const auto& [path, c] : commands) {
        // The condition: the path's last word was given (the top level: no command yet).
        const auto last = path.substr(path.rfind(' ') == std::string::npos ? 0 : path.rfind(' ') + 1);
        const std::string when =
            path.empty() ? "__fish_use_subcommand" : "__fish_seen_subcommand_from " + last;
        if (!c.subcommands.empty())
            s += fmt::format("complete -c diffract -n '{}' -a '{}'\n", when, fmt::join(c.subcommands, " "));
        for (const auto& o : c.options)
            s += fmt::format("complete -c diffract -n '{}' -l {} -r -F\n", when, o.substr(2));
    }
    return s;
}

}  // namespace

void add_completion(CLI::App& app) {
    auto shell = std::make_shared<std::string>();
    auto* sub = app.add_subcommand("completion", "Print a shell completion script: bash, zsh or fish");
    sub->add_option("shell", *shell, "bash, zsh or fish")->required();
    on_run(sub, [shell, &app] {
        std::map<std::string, Command> commands;
        collect(&app, "", commands);
        if (*shell == "bash") {
            fmt::print("{}", bash_script(commands));
        } else if (*shell == "zsh") {
            fmt::print(
                "# diffract completion for zsh: eval \"$(diffract completion zsh)\"\n"
                "autoload -U +X bashcompinit && bashcompinit\n{}",
                bash_script(commands));
        } else if (*shell == "fish") {
            fmt::print("{}", fish_script(commands));
        } else {
            throw InputError(fmt::format("completion: expected bash, zsh or fish, found '{}'", *shell));
        }
        return 0;
    });
}

}  // namespace diffract::cli
