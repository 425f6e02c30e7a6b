// gguf_dump FILE                 prints {"version", "architecture", "alignment", "data_offset",
//                                "tensors": [{"name", "dtype" (ggml type name), "shape", "offset",
//                                "nbytes"}], "metadata": {...}} as JSON on stdout.
// gguf_dump FILE TENSOR OUT.f32  writes TENSOR dequantised to raw little-endian float32
//                                (every floating type: F32, F16, BF16, F64 and the block-quantised types
//                                of core/block_quant.hpp), in stored order.
// An InputError is printed as one line on stderr and exits 2; bad usage exits 1.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diffract/core/block_quant.hpp"
#include "diffract/core/dtype.hpp"
#include "diffract/core/error.hpp"
#include "diffract/formats/gguf.hpp"

namespace {

using nlohmann::json;
using namespace diffract;
using namespace diffract::formats;

void dump(const GgufFile& f) {
    json tensors = json::array();
    for (const auto& t : f.tensors) {
        tensors.push_back({{"name", t.name},
                           {"dtype", gguf_type_name(f, t)},
                           {"shape", t.shape},
                           {"offset", t.offset},
                           {"nbytes", t.nbytes}});
    }
    const json out{{"version", f.version},          {"architecture", f.architecture},
                   {"alignment", f.alignment},      {"data_offset", f.data_offset},
                   {"tensors", std::move(tensors)}, {"metadata", f.metadata}};
    std::cout << out.dump() << "\n";
}

void extract(const GgufFile& f, const std::string& name, const std::string& out_path) {
    const TensorInfo* t = nullptr;
    for (const auto& x : f.tensors) {
        if (x.name == name) t = &x;
    }
    if (t == nullptr) throw_input_error(f.file->path(), name, "no such tensor in the file");
    const auto n = static_cast<std::size_t>(t->numel());
    std::vector<float> values(n);
    if (dtype_is_block(t->dtype)) {
        dequantize_blocks(t->bytes().data(), t->dtype, n, values.data());
    } else if (dtype_is_float(t->dtype)) {
        convert_to_f32(t->bytes().data(), t->dtype, n, values.data());
    } else {
        throw_input_error(
            f.file->path(), name,
            fmt::format("cannot dequantise ggml type {} (expected a floating or block-quantised type)",
                        gguf_type_name(f, *t)));
    }
    std::ofstream out(out_path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (!out) throw_input_error(out_path, "", "cannot write the output file");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2 && argc != 4) {
        std::cerr << "usage: gguf_dump FILE [TENSOR OUT.f32]\n";
        return 1;
    }
    try {
        const auto f = open_gguf(argv[1]);
        if (argc == 2) {
            dump(f);
        } else {
            extract(f, argv[2], argv[3]);
        }
    } catch (const InputError& e) {
        std::cerr << e.what() << "\n";
        return 2;
    }
    return 0;
}
