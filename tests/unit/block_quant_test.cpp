// The block-quantised dtypes: geometry, argument checks, hand-computed blocks, and a matrix read of a
// row-blocked tensor. Agreement with gguf-py on random blocks of every type is in
// tests/python/test_gguf_quant_types.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "diffract/core/block_quant.hpp"
#include "diffract/core/dtype.hpp"
#include "diffract/core/matrix.hpp"

using namespace diffract;

TEST(BlockQuant, Geometry) {
    EXPECT_FALSE(dtype_is_block(DType::F32));
    EXPECT_EQ(dtype_block_size(DType::F16), 1u);
    EXPECT_EQ(dtype_bytes(DType::F16, 3), 6u);
    EXPECT_TRUE(dtype_is_block(DType::Q4_K));
    EXPECT_EQ(dtype_block_size(DType::Q4_K), 256u);
    EXPECT_EQ(dtype_size(DType::Q4_K), 144u);
    EXPECT_EQ(dtype_bytes(DType::Q4_K, 512), 288u);
    EXPECT_EQ(dtype_bytes(DType::NVFP4, 128), 72u);
    EXPECT_THROW(dtype_bytes(DType::Q4_0, 33), std::invalid_argument);
    EXPECT_FALSE(dtype_from_name("Q4_K").has_value());  // not a safetensors dtype
    EXPECT_TRUE(dtype_is_float(DType::IQ2_XXS));
}

TEST(BlockQuant, RejectsPlainTypesAndPartialBlocks) {
    std::vector<std::byte> src(64);
    std::vector<float> out(64);
    EXPECT_THROW(dequantize_blocks(src.data(), DType::F32, 4, out.data()), std::invalid_argument);
    EXPECT_THROW(dequantize_blocks(src.data(), DType::Q4_0, 31, out.data()), std::invalid_argument);
}

TEST(BlockQuant, Q4_0ByHand) {
    // d = 0.5 (f16 0x3800); byte j holds q_j (low nibble) and q_{j+16} (high nibble); x = d * (q - 8).
    std::vector<std::byte> b(18);
    const std::uint16_t d = 0x3800;
    std::memcpy(b.data(), &d, 2);
    for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<std::byte>(j | ((15 - j) << 4));
    std::vector<float> x(32);
    dequantize_blocks(b.data(), DType::Q4_0, 32, x.data());
    EXPECT_EQ(x[0], -4.0f);   // 0.5 * (0 - 8)
    EXPECT_EQ(x[15], 3.5f);   // 0.5 * (15 - 8)
    EXPECT_EQ(x[16], 3.5f);   // high nibble of byte 0: 15
    EXPECT_EQ(x[31], -4.0f);  // high nibble of byte 15: 0
}

TEST(BlockQuant, MatrixReadDecodesRowsOfBlocks) {
    // A [2, 64] Q8_0 tensor: row r, block k has d = 1 and q_j = 10 r + k + j (two blocks per row).
    std::vector<std::byte> bytes(2 * 2 * 34);
    for (int r = 0; r < 2; ++r)
        for (int k = 0; k < 2; ++k) {
            std::byte* blk = bytes.data() + (2 * r + k) * 34;
            const std::uint16_t one = 0x3C00;
            std::memcpy(blk, &one, 2);
            for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<std::byte>(10 * r + k + j);
        }
    TensorInfo t;
    t.name = "w";
    t.dtype = DType::Q8_0;
    t.shape = {2, 64};
    t.nbytes = bytes.size();
    t.file = MappedFile::from_memory("mem", nullptr, bytes.data(), bytes.size());
    const auto m = read_matrix<double>(t, {1, 1, 30, 4, false});
    ASSERT_EQ(m.rows, 1);
    ASSERT_EQ(m.cols, 4);
    EXPECT_EQ(m(0, 0), 10 + 0 + 30);
    EXPECT_EQ(m(0, 1), 10 + 0 + 31);
    EXPECT_EQ(m(0, 2), 10 + 1 + 0);  // column 32: the second block
    EXPECT_EQ(m(0, 3), 10 + 1 + 1);
}

TEST(BlockQuant, MatrixReadFollowsTheRowOrder) {
    // 4 rows of one Q8_0 block each, row r holding the value r; one head of 4 rows in RoPE layout.
    std::vector<std::byte> bytes(4 * 34);
    for (int r = 0; r < 4; ++r) {
        const std::uint16_t one = 0x3C00;
        std::memcpy(bytes.data() + 34 * r, &one, 2);
        for (int j = 0; j < 32; ++j) bytes[34 * r + 2 + j] = static_cast<std::byte>(r);
    }
    TensorInfo t;
    t.name = "blk.0.attn_k.weight";
    t.dtype = DType::Q8_0;
    t.shape = {4, 32};
    t.nbytes = bytes.size();
    t.rope_head_rows = 4;
    t.file = MappedFile::from_memory("mem", nullptr, bytes.data(), bytes.size());
    const auto m = read_matrix<float>(t, {0, 4, 0, 32, false});
    EXPECT_EQ(m(0, 0), 0.0f);
    EXPECT_EQ(m(1, 0), 2.0f);  // logical row 1 (first half, pair 1) is stored at row 2
    EXPECT_EQ(m(2, 0), 1.0f);
    EXPECT_EQ(m(3, 5), 3.0f);
}
