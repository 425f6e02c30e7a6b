// diffract metrics: the catalog — field, level, formula, inputs.
#include <fmt/format.h>

#include "commands/commands.hpp"
#include "diffract/analysis/catalog.hpp"

namespace diffract::cli {

void add_metrics(CLI::App& app) {
    auto* sub = app.add_subcommand("metrics", "List every field with its formula, level and inputs");
    on_run(sub, [] {
        fmt::print("{:<24} {:<12} {:<8} {:<40} {}\n", "field", "level", "default", "inputs", "formula");
        for (const auto& f : analysis::field_catalog())
            fmt::print("{:<24} {:<12} {:<8} {:<40} {}\n", f.name, analysis::level_name(f.level),
                       f.is_vector ? "vector" : (f.in_default ? "yes" : "no"), f.inputs, f.formula);
        return 0;
    });
}

}  // namespace diffract::cli
