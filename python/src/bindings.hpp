// Shared declarations of the diffract._core extension: each bindings file registers one part of the
// module. The binding layer only converts arguments and results; every computation is a library call.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include <nanobind/nanobind.h>

#include "diffract/core/progress.hpp"
#include "diffract/formats/checkpoint.hpp"

namespace diffract::python {

namespace nb = nanobind;

// An opened checkpoint as Python sees it. `spec` is what opened it ("" for in-memory models), so that
// commands which open models themselves can open it again.
struct PyCheckpoint {
    std::shared_ptr<const formats::Checkpoint> ck;
    std::string spec;
};

// A model argument: a spec string or an opened checkpoint.
using ModelArg = std::variant<std::string, std::shared_ptr<PyCheckpoint>>;

// A shared owner that keeps a Python object alive from C++ (released under the GIL).
std::shared_ptr<const void> keep_alive(nb::handle object);

// The engine's progress reports passed to a Python callable `report(done, total, label)` (the package's
// _progress display), called under the GIL from the engine's threads; an exception it raises is
// reported as unraisable and the run goes on. None: no sink (the engine stays silent).
ProgressSink progress_sink(nb::handle report);

void bind_errors(nb::module_& m);
void bind_checkpoint(nb::module_& m);
void bind_analysis(nb::module_& m);
void bind_custom_metrics(nb::module_& m);
void bind_edits(nb::module_& m);
void bind_sweeps(nb::module_& m);

}  // namespace diffract::python
