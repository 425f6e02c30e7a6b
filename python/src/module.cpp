// diffract_spectral._core: the extension module of the `diffract_spectral` Python package (`import
// diffract_spectral as diffract`) (see docs/python.md).
#include <Python.h>

#include <system_error>

#include "bindings.hpp"
#include "diffract/core/cancel.hpp"
#include "diffract/core/error.hpp"

namespace diffract::python {

std::shared_ptr<const void> keep_alive(nb::handle object) {
    object.inc_ref();
    return std::shared_ptr<const void>(object.ptr(), [](const void* p) {
        if (!Py_IsInitialized()) return;  // interpreter gone: the reference cannot be released
        const PyGILState_STATE state = PyGILState_Ensure();
        Py_DECREF(static_cast<PyObject*>(const_cast<void*>(p)));
        PyGILState_Release(state);
    });
}

ProgressSink progress_sink(nb::handle report) {
    if (report.is_none()) return {};
    auto owner = keep_alive(report);
    return [owner](std::size_t done, std::size_t total, std::string_view label) {
        nb::gil_scoped_acquire acquire;
        try {
            nb::handle(static_cast<PyObject*>(const_cast<void*>(owner.get())))(
                done, total, nb::str(label.data(), label.size()));
        } catch (nb::python_error& e) {
            e.discard_as_unraisable("diffract: the progress display");
        }
    };
}

void bind_errors(nb::module_& m) {
    // InputError: the CLI's "diffract: error: <message>" (exit 2), with the same message.
    nb::exception<InputError>(m, "InputError", PyExc_ValueError);
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const Cancelled&) {
            PyErr_SetNone(PyExc_KeyboardInterrupt);
        } catch (const std::system_error& e) {
            // A full disk, too many open files, a missing path: OSError (FileNotFoundError, ...) with
            // its errno, as Python's own I/O raises; anything else goes on to nanobind's translation.
            if (!is_environment_error(e.code())) throw;
            if (PyObject* args = Py_BuildValue("(is)", e.code().value(), e.what())) {
                PyErr_SetObject(PyExc_OSError, args);
                Py_DECREF(args);
            }
        }
    });
}

}  // namespace diffract::python

NB_MODULE(_core, m) {
    using namespace diffract::python;
    m.doc() = "diffract's C++ engine (use the `diffract` package, not this module, directly)";
    m.attr("__version__") = DIFFRACT_VERSION;  // CMake's project(VERSION), as the CLI's --version
    bind_errors(m);
    bind_checkpoint(m);
    bind_analysis(m);
    bind_custom_metrics(m);
    bind_edits(m);
    bind_sweeps(m);
    bind_report(m);
}
