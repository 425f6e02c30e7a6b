// `diffract report`: figures from analyze/compare/sweep result directories and/or a results store,
// written as one self-contained HTML page (inline SVG, no script, opens offline) or as one SVG or
// PNG file per figure (PNG through rsvg-convert).
#pragma once

#include <string>
#include <vector>

#include "diffract/report/config.hpp"
#include "diffract/report/figures.hpp"

namespace diffract::report {

enum class OutputFormat { html, svg, png };
OutputFormat parse_output_format(const std::string& s);  // InputError naming --format

struct ReportOptions {
    std::vector<std::string> inputs;  // result directories, or one store file (.sqlite)
    std::string store;                // singular values for the ESD figure; "" : default store if present
    std::string out;                  // the HTML file, or the directory of figure files
    OutputFormat format = OutputFormat::html;
    ReportConfig config;
};

struct ReportSummary {
    std::vector<std::string> written;  // files
    std::size_t figures = 0;
    std::vector<std::string> notes;  // figures skipped, and why
};

// The page: title, table of contents, each figure with its caption, the notes and the inputs.
std::string render_html(const std::vector<Figure>& figures, const std::vector<std::string>& notes,
                        const std::vector<std::string>& inputs, const std::string& title);

ReportSummary write_report(const ReportOptions& options);

}  // namespace diffract::report
