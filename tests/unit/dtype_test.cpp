#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "diffract/core/dtype.hpp"

using namespace diffract;

TEST(DType, NamesRoundTrip) {
    for (auto name :
         {"BOOL", "U8", "I8", "I16", "I32", "I64", "F8_E4M3", "F8_E5M2", "F16", "BF16", "F32", "F64"}) {
        auto t = dtype_from_name(name);
        ASSERT_TRUE(t.has_value()) << name;
        EXPECT_EQ(dtype_name(*t), name);
    }
    EXPECT_FALSE(dtype_from_name("Q8_0").has_value());  // not a safetensors dtype
    EXPECT_FALSE(dtype_from_name("F128").has_value());
}

TEST(DType, Bf16RoundTripsEveryPattern) {
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_f32(static_cast<std::uint16_t>(h));
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_bf16(f), h);
    }
}

TEST(DType, Bf16RoundsToNearestEven) {
    // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
    // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even).
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
              1.0f + std::ldexp(1.0f, -7));
}

TEST(DType, F16RoundTripsEveryPattern) {
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(static_cast<std::uint16_t>(h));
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_f16(f), h) << h;
    }
    EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
    EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

TEST(DType, F8KnownValues) {
    EXPECT_EQ(f8_e4m3_to_f32(0x38), 1.0f);
    EXPECT_EQ(f8_e4m3_to_f32(0x7E), 448.0f);  // e4m3fn max
    EXPECT_TRUE(std::isnan(f8_e4m3_to_f32(0x7F)));
    EXPECT_EQ(f8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(f8_e5m2_to_f32(0x3C), 1.0f);
    EXPECT_EQ(f8_e5m2_to_f32(0x7B), 57344.0f);
    EXPECT_TRUE(std::isinf(f8_e5m2_to_f32(0x7C)));
    EXPECT_EQ(f8_e5m2_to_f32(0xBC), -1.0f);
}

TEST(DType, F8EncodeRoundTripsAndSaturates) {
    for (DType t : {DType::F8_E4M3, DType::F8_E5M2}) {
        for (int b = 0; b < 256; ++b) {
            std::byte in{static_cast<std::uint8_t>(b)};
            float f;
            convert_to_f32(&in, t, 1, &f);
            if (!std::isfinite(f)) continue;
            std::byte out;
            convert_from_f32(&f, t, 1, &out);
            float back;
            convert_to_f32(&out, t, 1, &back);
            EXPECT_EQ(back, f) << b;
        }
    }
    const float big = 1e9f;
    std::byte out;
    convert_from_f32(&big, DType::F8_E4M3, 1, &out);
    EXPECT_EQ(f8_e4m3_to_f32(static_cast<std::uint8_t>(out)), 448.0f);
}

TEST(DType, ConvertsUnalignedBuffers) {
    std::vector<std::byte> buf(1 + 3 * 4);
    const float vals[3] = {1.5f, -2.25f, 3.0f};
    std::memcpy(buf.data() + 1, vals, sizeof(vals));
    double out[3];
    convert_to_f64(buf.data() + 1, DType::F32, 3, out);
    EXPECT_EQ(out[0], 1.5);
    EXPECT_EQ(out[1], -2.25);
    EXPECT_EQ(out[2], 3.0);
}
