// Custom metrics: a Python callable registered as a custom field (analysis/custom_fields.hpp). The
// engine calls it from its worker threads; the call takes the GIL and passes float64 arrays.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "diffract/analysis/custom_fields.hpp"

namespace diffract::python {
namespace {

using F64Array = nb::ndarray<nb::numpy, double>;

// A float64 array owning a copy of `data` (the callable may keep it).
nb::object array_copy(const double* data, std::vector<std::size_t> shape) {
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    auto* owned = new std::vector<double>(data, data + n);
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
    return nb::cast(F64Array(owned->data(), shape.size(), shape.data(), owner));
}

void register_metric(const std::string& name, const std::vector<std::string>& needs,
                     const std::string& version, nb::callable fn) {
    analysis::CustomField f;
    f.name = name;
    f.needs = needs;
    f.version = version;
    auto owner = keep_alive(fn);
    f.compute = [owner, needs](const analysis::CustomFieldInputs& in) {
        nb::gil_scoped_acquire acquire;
        nb::handle callable(static_cast<PyObject*>(const_cast<void*>(owner.get())));
        nb::list args;
        for (const auto& need : needs) {
            if (need == "weights_svals")
                args.append(array_copy(in.weights_svals->data(), {in.weights_svals->size()}));
            else if (need == "esd")
                args.append(array_copy(in.esd->data(), {in.esd->size()}));
            else
                args.append(
                    array_copy(in.weights->data.data(), {static_cast<std::size_t>(in.weights->rows),
                                                         static_cast<std::size_t>(in.weights->cols)}));
        }
        const nb::object value = callable(*args);
        const double v = PyFloat_AsDouble(value.ptr());
        if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
        return v;
    };
    analysis::register_custom_field(std::move(f));
}

std::vector<std::string> registered() {
    std::vector<std::string> names;
    for (const auto& f : analysis::custom_fields()) names.push_back(f.name);
    return names;
}

void forget_all() {
    for (const auto& name : registered()) analysis::unregister_custom_field(name);
}

}  // namespace

void bind_custom_metrics(nb::module_& m) {
    m.def("register_metric", &register_metric, nb::arg("name"), nb::arg("needs"), nb::arg("version"),
          nb::arg("fn"));
    m.def("unregister_metric", &analysis::unregister_custom_field, nb::arg("name"));
    m.def("registered_metrics", &registered);
    m.def("forget_metrics", &forget_all, "Unregisters every custom metric");
    // The registry is a C++ global holding the registered functions, and through their globals
    // whatever a notebook keeps (checkpoints, arrays): released when the interpreter exits, nanobind
    // would report those objects as leaked. Python's atexit handlers run while the interpreter is
    // whole, so the functions are let go there.
    nb::module_::import_("atexit").attr("register")(m.attr("forget_metrics"));
}

}  // namespace diffract::python
