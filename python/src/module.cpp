// diffract._core: the extension module of the `diffract` Python package (see docs/python.md).
#include <Python.h>

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

void bind_errors(nb::module_& m) {
    // InputError: the CLI's "diffract: error: <message>" (exit 2), with the same message.
    nb::exception<InputError>(m, "InputError", PyExc_ValueError);
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const Cancelled&) {
            PyErr_SetNone(PyExc_KeyboardInterrupt);
        }
    });
}

}  // namespace diffract::python

NB_MODULE(_core, m) {
    using namespace diffract::python;
    m.doc() = "diffract's C++ engine (use the `diffract` package, not this module, directly)";
    bind_errors(m);
    bind_checkpoint(m);
    bind_analysis(m);
    bind_custom_metrics(m);
    bind_edits(m);
    bind_sweeps(m);
}
