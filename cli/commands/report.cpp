// diffract report (STORE | DIR...) --out report.html [--format html|svg|png]: figures from analyze,
// compare and sweep results as one self-contained HTML page, or one SVG/PNG file per figure.
#include <fmt/format.h>

#include "commands/commands.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/split_list.hpp"
#include "diffract/report/palette.hpp"
#include "diffract/report/report.hpp"

namespace diffract::cli {
namespace {

struct ReportArgs {
    std::vector<std::string> inputs;
    std::string out, format = "html", store, config_file;
    std::string metrics, roles, layers, models, colours, scatter, esd_tensor, heatmap_role, agreement_field,
        reference, title;
    bool evolution = false, no_evolution = false, quiet = false, verbose = false;
    std::optional<int> overlap_layer;
};

// Flags override the config file's keys.
report::ReportConfig make_config(const ReportArgs& a) {
    report::ReportConfig c;
    if (!a.config_file.empty()) report::read_config_file(a.config_file, c);
    if (!a.metrics.empty()) c.metrics = split_list(a.metrics);
    if (!a.roles.empty()) c.roles = a.roles;
    if (!a.layers.empty()) c.layers = a.layers;
    if (!a.models.empty()) c.models = split_list(a.models);
    if (!a.scatter.empty()) c.scatter = split_list(a.scatter);
    if (!a.esd_tensor.empty()) c.esd_tensor = a.esd_tensor;
    if (!a.heatmap_role.empty()) c.heatmap_role = a.heatmap_role;
    if (!a.agreement_field.empty()) c.agreement_field = a.agreement_field;
    if (!a.reference.empty()) c.reference = a.reference;
    if (!a.title.empty()) c.title = a.title;
    if (a.evolution) c.evolution = true;
    if (a.no_evolution) c.evolution = false;
    if (a.overlap_layer) {
        if (*a.overlap_layer < 0)
            throw InputError(fmt::format(
                "--overlap-layer: expected a layer index (an integer >= 0), found {}", *a.overlap_layer));
        c.overlap_layer = a.overlap_layer;
    }
    for (const auto& item : split_list(a.colours)) {
        const auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0)
            throw InputError(fmt::format("--colours: expected NAME=COLOUR, found '{}'", item));
        c.colours[item.substr(0, eq)] = item.substr(eq + 1);
        report::check_colour(item.substr(eq + 1), "--colours");
    }
    return c;
}

int run_report(const ReportArgs& a) {
    report::ReportOptions o;
    o.inputs = a.inputs;
    o.out = a.out;
    o.store = a.store;
    o.format = report::parse_output_format(a.format);
    o.config = make_config(a);
    const auto summary = report::write_report(o);
    // The notes say which panels were not drawn and why; they need no action, so they are listed in
    // the report's "Not shown" section and printed only with --verbose.
    if (a.verbose)
        for (const auto& n : summary.notes) fmt::print(stderr, "diffract: note: {}\n", one_line(n));
    if (!a.quiet)
        fmt::print(
            stderr, "report: {} figures{} -> {}\n", summary.figures,
            summary.notes.empty() || a.verbose
                ? std::string()
                : fmt::format(" ({} panels not drawn: the report's \"Not shown\" section, or --verbose)",
                              summary.notes.size()),
            o.format == report::OutputFormat::html
                ? a.out
                : fmt::format("{} ({} files)", a.out, summary.written.size()));
    return 0;
}

}  // namespace

void add_report(CLI::App& app) {
    auto a = std::make_shared<ReportArgs>();
    auto* sub = app.add_subcommand(
        "report", "Figures from analyze/compare/sweep results: one HTML page, or SVG/PNG files");
    sub->add_option("inputs", a->inputs,
                    "Result directories (metrics.csv, compare.csv, heads.csv, curve.csv) or a store")
        ->required();
    sub->add_option("--out", a->out, "The HTML file, or the directory of figure files (--format svg|png)")
        ->required();
    sub->add_option("--format", a->format, "html (one self-contained page), svg or png (one file per figure)")
        ->capture_default_str();
    sub->add_option(
        "--store", a->store,
        "Results store with the singular values (ESD figure; default .diffract/results.sqlite if present)");
    sub->add_option("--config", a->config_file,
                    "JSON file with the keys of docs/report.md (flags override it)");
    sub->add_option("--metric,--metrics", a->metrics,
                    "Metrics of the layer curves, box plots and evolution (default pl_alpha,stable_rank)");
    sub->add_option("--roles", a->roles, "Roles to show (default attn_q,attn_v,mlp_down when present)");
    sub->add_option("--layers", a->layers, "Layers to show (e.g. 0-3,7)");
    sub->add_option("--models", a->models, "Models to show, in this order (default: all, in input order)");
    sub->add_option("--colours,--colors", a->colours,
                    "Colours: NAME=COLOUR,... (model or role; #rrggbb or CSS name)");
    sub->add_option("--scatter", a->scatter, "The scatter's two metrics: X,Y (default pl_alpha,stable_rank)");
    sub->add_option("--esd-tensor", a->esd_tensor,
                    "Tensor of the ESD figure (default: attn_q of the middle layer)");
    sub->add_option("--heatmap-role", a->heatmap_role,
                    "Head block of the agreement heatmap (default attn_q)");
    sub->add_option("--agreement-field", a->agreement_field,
                    "compare.csv field of the agreement heatmap (default avg_l_agreement)");
    sub->add_option("--reference", a->reference,
                    "Reference model of the difference panels (default: heads.csv's)");
    sub->add_option("--overlap-layer", a->overlap_layer,
                    "Layer of the expert overlap map (default: the layer whose mean overlap changed most)");
    sub->add_option("--title", a->title, "Page title");
    sub->add_flag("--evolution", a->evolution,
                  "Treat the models as a training series (ordered by the step in their names)");
    sub->add_flag("--no-evolution", a->no_evolution, "No evolution figures even when names carry steps");
    sub->add_flag("--quiet", a->quiet, "No summary line");
    sub->add_flag("--verbose", a->verbose, "Print a note for each panel not drawn, and why");
    on_run(sub, [a] { return run_report(*a); });
}

}  // namespace diffract::cli
