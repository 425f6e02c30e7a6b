// `diffract report`: figures from analyze/compare/sweep result directories and/or a results store,
// written as one self-contained HTML page (inline SVG, no script, opens offline) or as one SVG or
// PNG file per figure (PNG through rsvg-convert).
#pragma once

#include <string>
#include <vector>

#include "diffract/core/names.hpp"

#include "diffract/report/config.hpp"
#include "diffract/report/data.hpp"
#include "diffract/report/figures.hpp"

namespace diffract::report {

enum class OutputFormat { html, svg, png };
inline constexpr NameTable<OutputFormat, 3> kOutputFormatNames{
    {{OutputFormat::html, "html"}, {OutputFormat::svg, "svg"}, {OutputFormat::png, "png"}}};
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

// The page: title, the heads that changed most and least (when heads.csv rows are among the inputs), the
// experts likewise (experts.csv), table of contents, each figure with its caption, the notes and the inputs.
std::string render_html(const std::vector<Figure>& figures, const std::vector<std::string>& notes,
                        const std::vector<std::string>& inputs, const std::string& title,
                        const std::vector<HeadScore>& heads = {}, const std::string& precision = {},
                        const std::vector<ExpertScore>& experts = {});

// Per model, the `k` heads with the highest and the lowest importance (what the continued pre-training
// changed most and least beyond the reference's drift): rank, layer:head, importance, the update
// norms. An HTML section; empty without heads.
std::string heads_table_html(const std::vector<HeadScore>& heads, std::size_t k = 5);

// The same for a mixture of experts (experts.csv): per model, the `k` routed experts with the highest
// and the lowest importance (the update norm without a reference), then its shared experts listed apart,
// layer by layer. Empty without experts.
std::string experts_table_html(const std::vector<ExpertScore>& experts, std::size_t k = 5);

// The figures, notes and head scores of a report, drawn but not written (`out` and `format` unused):
// what write_report writes, and what Python shows in a notebook.
struct BuiltReport {
    std::vector<Figure> figures;
    std::vector<std::string> notes;
    std::vector<HeadScore> heads;
    std::vector<ExpertScore> experts;
    std::string precision;  // ReportData::precision_summary
};
BuiltReport build_report(const ReportOptions& options);

ReportSummary write_report(const ReportOptions& options);

}  // namespace diffract::report
