// Orchestration of `diffract report`: load the inputs, draw the figures, write the page or the files.
#include "diffract/report/report.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "diffract/core/atomic_file.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/output_path.hpp"
#include "diffract/report/data.hpp"
#include "diffract/run/options.hpp"
#include "diffract/run/stored_results.hpp"

namespace diffract::report {
namespace fs = std::filesystem;
namespace {

// The first rsvg-convert on PATH, or "".
std::string find_rsvg_convert() {
    const char* path = std::getenv("PATH");
    std::stringstream ss(path ? path : "");
    std::string dir;
    while (std::getline(ss, dir, ':')) {
        const auto candidate = fs::path(dir.empty() ? "." : dir) / "rsvg-convert";
        if (fs::is_regular_file(candidate)) return candidate.string();
    }
    return "";
}

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

ReportData load_inputs(const ReportOptions& o) {
    ReportData data;
    std::string store = o.store;
    bool dirs = false;
    for (const auto& in : o.inputs) {
        if (fs::is_regular_file(in)) {
            if (!store.empty() && store != in)
                throw InputError(fmt::format("{}: a second store (already given: {})", in, store));
            store = in;
        } else {
            load_result_dir(in, data);
            dirs = true;
        }
    }
    if (!store.empty()) {
        load_store(store, data, !dirs);
    } else if (const auto default_store = run::resolved_store_path(""); fs::is_regular_file(default_store)) {
        load_store(default_store, data, false);
    }
    return data;
}

void write_figure_files(const std::vector<Figure>& figures, const ReportOptions& o, ReportSummary& summary) {
    const std::string rsvg = o.format == OutputFormat::png ? find_rsvg_convert() : "";
    if (o.format == OutputFormat::png && rsvg.empty())
        throw InputError(
            "--format png: rsvg-convert not found on PATH (install librsvg2-bin, or use --format svg)");
    fs::create_directories(o.out);
    for (const auto& f : figures) {
        const auto svg_path = (fs::path(o.out) / (f.id + ".svg")).string();
        const std::string doc = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + f.svg;
        if (o.format == OutputFormat::svg) {
            write_file_atomically(svg_path, doc);
            summary.written.push_back(svg_path);
            continue;
        }
        const auto png_path = (fs::path(o.out) / (f.id + ".png")).string();
        const auto tmp_svg = png_path + ".tmp.svg", tmp_png = png_path + ".tmp";
        write_file_atomically(tmp_svg, doc);
        const auto cmd = fmt::format("{} -f png -z 2 -b white -o {} {}", shell_quote(rsvg),
                                     shell_quote(tmp_png), shell_quote(tmp_svg));
        const int rc = std::system(cmd.c_str());
        fs::remove(tmp_svg);
        if (rc != 0) {
            fs::remove(tmp_png);
            throw std::runtime_error(fmt::format("{}: rsvg-convert failed (status {})", png_path, rc));
        }
        try {
            check_output_kind(png_path, OutputKind::file);  // never renamed over a FIFO or device
        } catch (...) {
            fs::remove(tmp_png);
            throw;
        }
        fs::rename(tmp_png, png_path);
        summary.written.push_back(png_path);
    }
}

}  // namespace

OutputFormat parse_output_format(const std::string& s) {
    if (const auto f = value_of(kOutputFormatNames, s)) return *f;
    throw InputError(fmt::format("--format: expected {}, found '{}'", choice_list(kOutputFormatNames), s));
}

namespace {

void check_config(const ReportOptions& o) {
    if (o.inputs.empty()) throw InputError("report: no input (give result directories or a store)");
    if (o.config.metrics.empty()) throw InputError("--metric: no metric given");
    if (o.config.scatter.size() != 2)
        throw InputError("--scatter: expected two metrics, e.g. pl_alpha,stable_rank");
}

// The page or figure folder never replaces an input directory, one of its CSVs or a store, nor a
// checkpoint any store among the inputs has read.
void check_output(const ReportOptions& o) {
    std::vector<std::string> inputs = o.inputs;
    inputs.push_back(run::resolved_store_path(o.store));
    check_output_path(o.out, inputs);
    check_output_kind(o.out, o.format == OutputFormat::html ? OutputKind::file : OutputKind::directory);
    std::vector<std::string> stores{run::resolved_store_path(o.store)};
    for (const auto& in : o.inputs)
        if (std::error_code ec; std::filesystem::is_regular_file(in, ec)) stores.push_back(in);
    for (const auto& s : stores) {
        std::vector<std::string> seen;
        try {
            seen = run::stored_input_paths(s);
        } catch (const InputError&) {
            continue;  // not a store: load_inputs says what it is
        }
        check_output_path(o.out, seen);
    }
}

// The figures of checked options (build_report and write_report check first, each once).
BuiltReport build_checked(const ReportOptions& o) {
    const auto data = load_inputs(o);
    FigureContext ctx(data, o.config);
    for (const auto& m : o.config.models)
        if (std::find(data.models.begin(), data.models.end(), m) == data.models.end())
            throw InputError(fmt::format("--models: no results for model '{}' in the inputs", m));
    ctx.notes.insert(ctx.notes.begin(), data.notes.begin(), data.notes.end());
    auto figures = build_figures(ctx);
    return {std::move(figures), std::move(ctx.notes), data.heads, data.experts, data.precision_summary()};
}

}  // namespace

BuiltReport build_report(const ReportOptions& o) {
    check_config(o);
    return build_checked(o);
}

ReportSummary write_report(const ReportOptions& o) {
    check_config(o);
    check_output(o);
    const auto built = build_checked(o);
    ReportSummary summary;
    summary.figures = built.figures.size();
    summary.notes = built.notes;
    if (o.format == OutputFormat::html) {
        if (fs::path(o.out).has_parent_path()) fs::create_directories(fs::path(o.out).parent_path());
        std::vector<std::string> inputs = o.inputs;
        if (!o.store.empty()) inputs.push_back(o.store);
        write_file_atomically(o.out, render_html(built.figures, built.notes, inputs, o.config.title,
                                                 built.heads, built.precision, built.experts));
        summary.written.push_back(o.out);
    } else {
        write_figure_files(built.figures, o, summary);
    }
    return summary;
}

}  // namespace diffract::report
