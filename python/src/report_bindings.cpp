// diffract.report and diffract.figures: the report's figures drawn in C++, for a page on disk or a
// notebook cell (each figure an SVG string with its id, title and caption).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "diffract/report/report.hpp"

namespace diffract::python {
namespace {

report::ReportOptions options_of(const std::vector<std::string>& inputs, const std::string& store,
                                 const std::string& config_json) {
    report::ReportOptions o;
    o.inputs = inputs;
    o.store = store;
    if (!config_json.empty()) report::read_config_json(config_json, "report()", o.config);
    return o;
}

nb::dict figures(const std::vector<std::string>& inputs, const std::string& store,
                 const std::string& config_json) {
    report::BuiltReport built;
    {
        nb::gil_scoped_release release;
        built = report::build_report(options_of(inputs, store, config_json));
    }
    nb::list figs;
    for (const auto& f : built.figures) {
        nb::dict d;
        d["id"] = f.id;
        d["title"] = f.title;
        d["caption"] = f.caption;
        d["svg"] = f.svg;
        figs.append(d);
    }
    nb::dict out;
    out["figures"] = figs;
    out["notes"] = built.notes;
    return out;
}

nb::dict write(const std::vector<std::string>& inputs, const std::string& store,
               const std::string& config_json, const std::string& out, const std::string& format) {
    auto o = options_of(inputs, store, config_json);
    o.out = out;
    o.format = report::parse_output_format(format);
    report::ReportSummary s;
    {
        nb::gil_scoped_release release;
        s = report::write_report(o);
    }
    nb::dict d;
    d["written"] = s.written;
    d["figures"] = s.figures;
    d["notes"] = s.notes;
    return d;
}

}  // namespace

void bind_report(nb::module_& m) {
    m.def("report_figures", &figures, nb::arg("inputs"), nb::arg("store"), nb::arg("config_json"));
    m.def("write_report", &write, nb::arg("inputs"), nb::arg("store"), nb::arg("config_json"), nb::arg("out"),
          nb::arg("format"));
}

}  // namespace diffract::python
