// tensor_dump CHECKPOINT TENSOR OUT.f32: writes one tensor, decoded through the same reader the
// analyses use, as raw little-endian float32 (for the Python interop tests).
#include <cstdio>
#include <exception>

#include "diffract/core/error.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/formats/checkpoint.hpp"

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: tensor_dump CHECKPOINT TENSOR OUT.f32\n");
        return 1;
    }
    try {
        const auto ck = diffract::formats::open_checkpoint(argv[1]);
        const auto* t = ck.find(argv[2]);
        if (!t) throw diffract::InputError(std::string(argv[1]) + ": tensor '" + argv[2] + "': not found");
        diffract::MatrixBlock whole{0, diffract::stored_rows(*t), 0, diffract::stored_cols(*t), false};
        const auto m = diffract::read_matrix<float>(*t, whole);
        std::FILE* f = std::fopen(argv[3], "wb");
        if (!f || std::fwrite(m.data.data(), sizeof(float), m.data.size(), f) != m.data.size()) return 1;
        std::fclose(f);
    } catch (const diffract::InputError& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    return 0;
}
