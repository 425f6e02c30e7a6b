// Checkpoints: opening (path, HF cache id, GGUF), in-memory models from buffers, and tensors as numpy
// arrays that view the mapping (read-only; the array keeps the mapping alive).
#include <cstring>

#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "diffract/core/dtype.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/formats/checkpoint_description.hpp"
#include "diffract/formats/memory_checkpoint.hpp"

namespace diffract::python {
namespace {

using Array = nb::ndarray<nb::numpy, nb::ro>;

// The numpy dtype a stored dtype is viewed as. BF16 and F8 are viewed as their bits (uint16, uint8):
// the Python layer reinterprets them as ml_dtypes types. Block-quantised GGUF types have no view.
std::optional<nb::dlpack::dtype> view_dtype(DType t) {
    using C = nb::dlpack::dtype_code;
    auto d = [](C code, int bits) {
        return nb::dlpack::dtype{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
    };
    switch (t) {
        case DType::BOOL:
            return d(C::Bool, 8);
        case DType::U8:
            return d(C::UInt, 8);
        case DType::I8:
            return d(C::Int, 8);
        case DType::U16:
            return d(C::UInt, 16);
        case DType::I16:
            return d(C::Int, 16);
        case DType::U32:
            return d(C::UInt, 32);
        case DType::I32:
            return d(C::Int, 32);
        case DType::U64:
            return d(C::UInt, 64);
        case DType::I64:
            return d(C::Int, 64);
        case DType::F8_E4M3:
        case DType::F8_E5M2:
            return d(C::UInt, 8);
        case DType::F16:
            return d(C::Float, 16);
        case DType::BF16:
            return d(C::UInt, 16);
        case DType::F32:
            return d(C::Float, 32);
        case DType::F64:
            return d(C::Float, 64);
        default:
            return std::nullopt;
    }
}

const TensorInfo& find_tensor(const formats::Checkpoint& ck, const std::string& name) {
    const auto* t = ck.find(name);
    if (!t) throw_input_error(ck.path, name, "no such tensor");
    return *t;
}

std::vector<std::size_t> shape_of(const TensorInfo& t) { return {t.shape.begin(), t.shape.end()}; }

// A float32 array owning `values` (a std::vector<float> or a Matrix<float>'s pooled vector).
template <typename Values>
Array float32_array(Values values, const std::vector<std::size_t>& shape) {
    auto* owned = new Values(std::move(values));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Values*>(p); });
    return Array(owned->data(), shape.size(), shape.data(), owner, nullptr, nb::dtype<float>());
}

// The tensor's bytes viewed in place (BF16/F8 as bits); block-quantised types and GGUF Q/K in RoPE
// layout decoded into float32, in Hugging Face row order.
Array tensor_view(const PyCheckpoint& self, const std::string& name) {
    const auto& t = find_tensor(*self.ck, name);
    const auto shape = shape_of(t);
    const auto dt = view_dtype(t.dtype);
    if (!dt || t.rope_head_rows > 0) {  // block-quantised or reordered rows: decode the logical matrix
        const MatrixBlock all{0, stored_rows(t), 0, stored_cols(t), false};
        return float32_array(std::move(read_matrix<float>(t, all).data), shape);
    }
    auto* file = new std::shared_ptr<const MappedFile>(t.file);
    nb::capsule owner(file,
                      [](void* p) noexcept { delete static_cast<std::shared_ptr<const MappedFile>*>(p); });
    return Array(t.bytes().data(), shape.size(), shape.data(), owner, nullptr, *dt);
}

// The tensor decoded into a float32 copy (any floating dtype).
Array tensor_decoded(const PyCheckpoint& self, const std::string& name) {
    const auto& t = find_tensor(*self.ck, name);
    if (!dtype_is_float(t.dtype)) throw_input_error(t.path(), name, "not a floating-point tensor");
    if (dtype_is_block(t.dtype) || t.rope_head_rows > 0) return tensor_view(self, name);
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    convert_to_f32(t.bytes().data(), t.dtype, out.size(), out.data());
    return float32_array(std::move(out), shape_of(t));
}

nb::dict tensor_info(const PyCheckpoint& self, const std::string& name) {
    const auto& t = find_tensor(*self.ck, name);
    nb::dict d;
    d["name"] = t.name;
    d["dtype"] = std::string(dtype_name(t.dtype));
    d["shape"] = nb::tuple(nb::cast(t.shape));
    d["nbytes"] = t.nbytes;
    d["offset"] = t.offset;
    d["path"] = t.path();
    return d;
}

}  // namespace

std::shared_ptr<const formats::Checkpoint> opened(const ModelArg& arg) {
    if (const auto* s = std::get_if<std::string>(&arg))
        return std::make_shared<formats::Checkpoint>(formats::open_checkpoint(*s));
    return std::get<std::shared_ptr<PyCheckpoint>>(arg)->ck;
}

namespace {

std::shared_ptr<PyCheckpoint> open(const std::string& spec) {
    return std::make_shared<PyCheckpoint>(
        PyCheckpoint{std::make_shared<formats::Checkpoint>(formats::open_checkpoint(spec)), spec});
}

// tensors: (name, safetensors dtype name, C-contiguous array holding the bytes).
using InTensor = std::tuple<std::string, std::string, nb::object>;
using InArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

std::shared_ptr<PyCheckpoint> from_buffers(const std::string& name, const std::vector<InTensor>& tensors,
                                           const std::string& config_json) {
    std::vector<formats::MemoryTensor> in;
    for (const auto& [tname, dtype, object] : tensors) {
        const auto array = nb::cast<InArray>(object);
        const auto dt = dtype_from_name(dtype);
        if (!dt) throw_input_error("memory:" + name, tname, "unsupported dtype " + dtype);
        formats::MemoryTensor m;
        m.name = tname;
        m.dtype = *dt;
        for (std::size_t i = 0; i < array.ndim(); ++i) m.shape.push_back(array.shape(i));
        m.owner = keep_alive(object);
        m.data = static_cast<const std::byte*>(array.data());
        m.nbytes = array.nbytes();
        in.push_back(std::move(m));
    }
    const auto config =
        config_json.empty() ? nlohmann::json() : parse_json_bounded(config_json, "memory:" + name, true);
    return std::make_shared<PyCheckpoint>(PyCheckpoint{
        std::make_shared<formats::Checkpoint>(formats::memory_checkpoint(name, std::move(in), config)), ""});
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
    nb::class_<PyCheckpoint>(m, "Checkpoint", "An opened checkpoint (file-mapped or in memory)")
        .def_prop_ro("name", [](const PyCheckpoint& c) { return c.ck->name; })
        .def_prop_ro("path", [](const PyCheckpoint& c) { return c.ck->path; })
        .def_prop_ro("format",
                     [](const PyCheckpoint& c) { return std::string(formats::format_name(c.ck->format)); })
        .def_prop_ro("spec", [](const PyCheckpoint& c) { return c.spec; })
        .def_prop_ro("config_json",
                     [](const PyCheckpoint& c) {
                         return c.ck->config.is_null() ? std::string() : c.ck->config.dump();
                     })
        .def_prop_ro("architecture", [](const PyCheckpoint& c) { return c.ck->schema.architecture; })
        .def_prop_ro("family", [](const PyCheckpoint& c) { return c.ck->schema.family; })
        .def("tensor_names",
             [](const PyCheckpoint& c) {
                 std::vector<std::string> names;
                 for (const auto& t : c.ck->tensors) names.push_back(t.name);
                 return names;
             })
        .def("tensor_info", &tensor_info, nb::arg("name"))
        .def("view", &tensor_view, nb::arg("name"),
             "The stored bytes viewed in place (BF16/F8 as their bits)")
        .def("decoded", &tensor_decoded, nb::arg("name"), "A floating tensor decoded into a float32 copy")
        .def(
            "describe",
            [](const PyCheckpoint& c) {
                const auto text = formats::describe_checkpoint(*c.ck).dump();
                return nb::module_::import_("json").attr("loads")(text);
            },
            "What `diffract inspect --json` prints: format, architecture, heads, the LoRA adapter (path, "
            "base, r, lora_alpha, targets) when one is merged, parameters, tensors");
    m.def("open_checkpoint", &open, nb::arg("spec"), nb::call_guard<nb::gil_scoped_release>());
    m.def("from_buffers", &from_buffers, nb::arg("name"), nb::arg("tensors"), nb::arg("config_json") = "");
}

}  // namespace diffract::python
