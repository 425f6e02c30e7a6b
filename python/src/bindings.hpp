// Shared declarations of the diffract_spectral._core extension: each bindings file registers one part of the
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

// The checkpoint a model argument names: opened from its spec, or the one already opened.
std::shared_ptr<const formats::Checkpoint> opened(const ModelArg& arg);

// Type slots for a bound struct whose `Members` hold Python objects (progress displays, sweep
// evaluators): they join Python's garbage collection. Without them a cycle through such a struct — an
// exception kept in a notebook global, its traceback's frame holding the struct, the struct's callable,
// the callable's globals holding the exception — is never collected, and nanobind reports the struct,
// and everything the cycle reaches, as leaked at exit.
template <typename T, nb::object T::*... Members>
struct GcSlots {
    static int traverse(PyObject* self, visitproc visit, void* arg) {
        Py_VISIT(Py_TYPE(self));
        if (!nb::inst_ready(self)) return 0;
        const T* t = nb::inst_ptr<T>(self);
        for (PyObject* o : {(t->*Members).ptr()...}) Py_VISIT(o);
        return 0;
    }
    static int clear(PyObject* self) {
        T* t = nb::inst_ptr<T>(self);
        (((t->*Members) = nb::none()), ...);
        return 0;
    }
    static inline PyType_Slot slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(&traverse)},
                                         {Py_tp_clear, reinterpret_cast<void*>(&clear)},
                                         {0, nullptr}};
};

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
void bind_report(nb::module_& m);

}  // namespace diffract::python
