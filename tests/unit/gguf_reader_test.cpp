#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "diffract/core/block_quant.hpp"
#include "diffract/core/dtype.hpp"
#include "diffract/core/error.hpp"
#include "diffract/formats/gguf.hpp"
#include "formats/gguf_types_impl.hpp"

using namespace diffract;
using namespace diffract::formats;

namespace {

// ---- A minimal GGUF writer -------------------------------------------------------------------

using Bytes = std::vector<std::byte>;

enum : std::uint32_t {
    kU8 = 0,
    kI8 = 1,
    kU16 = 2,
    kI16 = 3,
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kStr = 8,
    kArr = 9,
    kU64 = 10,
    kI64 = 11,
    kF64 = 12
};
enum : std::uint32_t { kTF32 = 0, kTF16 = 1, kTQ4_0 = 2, kTQ8_0 = 8, kTQ4_K = 12, kTQ8_K = 15, kTBF16 = 30 };

template <typename T>
void put(Bytes& b, T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
}
void put_str(Bytes& b, std::string_view s) {
    put<std::uint64_t>(b, s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    b.insert(b.end(), p, p + s.size());
}

struct Kv {
    std::string key;
    std::function<void(Bytes&)> value;  // writes the value type and the value
};
Kv kv_u32(std::string key, std::uint32_t v) {
    return {std::move(key), [v](Bytes& b) {
                put(b, kU32);
                put(b, v);
            }};
}
Kv kv_str(std::string key, std::string v) {
    return {std::move(key), [v](Bytes& b) {
                put(b, kStr);
                put_str(b, v);
            }};
}
Kv kv_raw(std::string key, std::function<void(Bytes&)> f) { return {std::move(key), std::move(f)}; }

struct Ti {
    std::string name;
    std::vector<std::uint64_t> ne;  // ggml order
    std::uint32_t type = kTF32;
    std::uint64_t offset = 0;
};

struct Spec {
    std::uint32_t magic = 0x46554747;
    std::uint32_t version = 3;
    std::optional<std::uint64_t> tensor_count, kv_count;  // override the true counts
    std::vector<Kv> kvs;
    std::vector<Ti> tis;
    std::uint64_t alignment = 32;  // padding used by the writer (not written as a key)
    Bytes data;
};

Bytes build(const Spec& s) {
    Bytes b;
    put(b, s.magic);
    put(b, s.version);
    put<std::uint64_t>(b, s.tensor_count.value_or(s.tis.size()));
    put<std::uint64_t>(b, s.kv_count.value_or(s.kvs.size()));
    for (const auto& kv : s.kvs) {
        put_str(b, kv.key);
        kv.value(b);
    }
    for (const auto& t : s.tis) {
        put_str(b, t.name);
        put<std::uint32_t>(b, static_cast<std::uint32_t>(t.ne.size()));
        for (auto d : t.ne) put(b, d);
        put(b, t.type);
        put(b, t.offset);
    }
    while (b.size() % s.alignment) b.push_back(std::byte{0});
    b.insert(b.end(), s.data.begin(), s.data.end());
    return b;
}

// A valid v3 file: F32 [2, 3], F16 [4], Q8_0 [2, 32], Q8_K [256] (not decoded), and assorted metadata.
Spec valid_spec() {
    Spec s;
    s.kvs.push_back(kv_str("general.architecture", "llama"));
    s.kvs.push_back(kv_u32("llama.attention.head_count", 4));
    s.kvs.push_back(kv_raw("llama.rope.freq_base", [](Bytes& b) {
        put(b, kF32);
        put(b, 10000.0f);
    }));
    s.kvs.push_back(kv_raw("general.flag", [](Bytes& b) {
        put(b, kBool);
        put<std::uint8_t>(b, 1);
    }));
    s.kvs.push_back(kv_raw("general.small_array", [](Bytes& b) {
        put(b, kArr);
        put(b, kI32);
        put<std::uint64_t>(b, 3);
        for (std::int32_t v : {1, -2, 3}) put(b, v);
    }));
    s.kvs.push_back(kv_raw("tokenizer.ggml.scores", [](Bytes& b) {  // summarised: 300 > 256
        put(b, kArr);
        put(b, kF32);
        put<std::uint64_t>(b, 300);
        for (int i = 0; i < 300; ++i) put(b, static_cast<float>(i));
    }));
    s.kvs.push_back(kv_raw("tokenizer.ggml.tokens", [](Bytes& b) {  // summarised strings
        put(b, kArr);
        put(b, kStr);
        put<std::uint64_t>(b, 257);
        for (int i = 0; i < 257; ++i) put_str(b, "tok" + std::to_string(i));
    }));
    s.kvs.push_back(kv_raw("general.nested", [](Bytes& b) {  // [[1, 2], []] of UINT16
        put(b, kArr);
        put(b, kArr);
        put<std::uint64_t>(b, 2);
        put(b, kU16);
        put<std::uint64_t>(b, 2);
        put<std::uint16_t>(b, 1);
        put<std::uint16_t>(b, 2);
        put(b, kU16);
        put<std::uint64_t>(b, 0);
    }));
    s.kvs.push_back(kv_raw("general.big", [](Bytes& b) {
        put(b, kU64);
        put<std::uint64_t>(b, 18446744073709551615ull);
    }));
    s.kvs.push_back(
        kv_raw("general.scalars", [](Bytes& b) {  // one of each scalar type, in an array of arrays
            put(b, kArr);
            put(b, kArr);
            put<std::uint64_t>(b, 9);
            auto one = [&b](std::uint32_t type, auto v) {
                put(b, type);
                put<std::uint64_t>(b, 1);
                put(b, v);
            };
            one(kU8, std::uint8_t{200});
            one(kI8, std::int8_t{-5});
            one(kU16, std::uint16_t{65535});
            one(kI16, std::int16_t{-300});
            one(kI32, std::int32_t{-70000});
            one(kI64, std::int64_t{-5'000'000'000});
            one(kF64, 0.1);
            one(kF32, 0.1f);
            one(kBool, std::uint8_t{0});
        }));
    s.tis.push_back({"blk.0.attn_q.weight", {3, 2}, kTF32, 0});
    s.tis.push_back({"blk.0.attn_norm.weight", {4}, kTF16, 32});
    s.tis.push_back({"token_embd.weight", {32, 2}, kTQ8_0, 64});
    s.tis.push_back({"output.weight", {256}, kTQ8_K, 160});
    s.data.resize(160 + 292);
    // F32: 1..6
    for (int i = 0; i < 6; ++i) {
        const float v = static_cast<float>(i + 1);
        std::memcpy(s.data.data() + 4 * i, &v, 4);
    }
    // F16: 1, -2, 0.5, 65504
    const std::uint16_t h[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF};
    std::memcpy(s.data.data() + 32, h, 8);
    // Q8_0 block 0: d = 0.5 (0x3800), q[i] = i - 16; block 1: d = 0.25 (0x3400), q[i] = 127 - i
    std::byte* q = s.data.data() + 64;
    const std::uint16_t d0 = 0x3800, d1 = 0x3400;
    std::memcpy(q, &d0, 2);
    for (int i = 0; i < 32; ++i) q[2 + i] = static_cast<std::byte>(static_cast<std::int8_t>(i - 16));
    std::memcpy(q + 34, &d1, 2);
    for (int i = 0; i < 32; ++i) q[36 + i] = static_cast<std::byte>(static_cast<std::int8_t>(127 - i));
    return s;
}

GgufFile parse(const Bytes& b) { return parse_gguf_bytes(b, "t.gguf"); }

// The parse throws InputError with a one-line message that starts with the label and contains needle.
#define EXPECT_GGUF_ERROR(bytes, needle)                                              \
    EXPECT_THROW(                                                                     \
        {                                                                             \
            try {                                                                     \
                parse(bytes);                                                         \
            } catch (const InputError& e) {                                           \
                const std::string msg = e.what();                                     \
                EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg; \
                EXPECT_EQ(msg.rfind("t.gguf: ", 0), 0u) << "message: " << msg;        \
                EXPECT_EQ(msg.find('\n'), std::string::npos) << "message: " << msg;   \
                throw;                                                                \
            }                                                                         \
        },                                                                            \
        InputError)

std::size_t find_bytes(const Bytes& hay, std::string_view needle) {
    for (std::size_t i = 0; i + needle.size() <= hay.size(); ++i)
        if (std::memcmp(hay.data() + i, needle.data(), needle.size()) == 0) return i;
    return std::string::npos;
}

}  // namespace

// ---- Valid files ---------------------------------------------------------------------------------

TEST(GgufReader, ParsesValidV3File) {
    const auto bytes = build(valid_spec());
    const auto f = parse(bytes);
    EXPECT_EQ(f.version, 3u);
    EXPECT_EQ(f.file, nullptr);
    EXPECT_EQ(f.architecture, "llama");
    EXPECT_EQ(f.alignment, 32u);
    EXPECT_EQ(f.data_offset % 32, 0u);
    EXPECT_EQ(f.data_offset + 452, bytes.size());

    ASSERT_EQ(f.tensors.size(), 4u);
    const auto& a = f.tensors[0];
    EXPECT_EQ(a.name, "blk.0.attn_q.weight");
    EXPECT_EQ(a.dtype, DType::F32);
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));  // ne = [3, 2] reversed
    EXPECT_EQ(a.offset, f.data_offset);
    EXPECT_EQ(a.nbytes, 24u);
    float first = 0;
    std::memcpy(&first, bytes.data() + a.offset, 4);
    EXPECT_EQ(first, 1.0f);

    const auto& b = f.tensors[1];
    EXPECT_EQ(b.dtype, DType::F16);
    EXPECT_EQ(b.shape, (std::vector<std::int64_t>{4}));
    EXPECT_EQ(b.offset, f.data_offset + 32);
    EXPECT_EQ(b.nbytes, 8u);

    const auto& c = f.tensors[2];
    EXPECT_EQ(c.name, "token_embd.weight");
    EXPECT_EQ(c.dtype, DType::Q8_0);
    EXPECT_EQ(c.shape, (std::vector<std::int64_t>{2, 32}));
    EXPECT_EQ(c.offset, f.data_offset + 64);
    EXPECT_EQ(c.nbytes, 68u);  // 64 / 32 * 34

    const auto& d = f.tensors[3];
    EXPECT_EQ(d.dtype, DType::U8);
    EXPECT_EQ(d.nbytes, 292u);
    EXPECT_EQ(d.numel(), 256);
    ASSERT_EQ(f.unsupported_types.size(), 1u);
    EXPECT_EQ(f.unsupported_types.at("output.weight"), "Q8_K");
    EXPECT_EQ(gguf_type_name(f, d), "Q8_K");
    EXPECT_EQ(gguf_type_name(f, c), "Q8_0");
    EXPECT_EQ(gguf_type_name(f, b), "F16");

    const auto& m = f.metadata;
    EXPECT_EQ(m.at("general.architecture"), "llama");
    EXPECT_EQ(m.at("llama.attention.head_count"), 4);
    EXPECT_EQ(m.at("llama.rope.freq_base").get<double>(), 10000.0);
    EXPECT_EQ(m.at("general.flag"), true);
    EXPECT_EQ(m.at("general.small_array"), nlohmann::json({1, -2, 3}));
    EXPECT_EQ(m.at("tokenizer.ggml.scores"),
              nlohmann::json({{"gguf_array_type", "FLOAT32"}, {"length", 300}}));
    EXPECT_EQ(m.at("tokenizer.ggml.tokens"),
              nlohmann::json({{"gguf_array_type", "STRING"}, {"length", 257}}));
    EXPECT_EQ(m.at("general.nested"), nlohmann::json::parse("[[1, 2], []]"));
    EXPECT_EQ(m.at("general.big").get<std::uint64_t>(), 18446744073709551615ull);
    const auto& sc = m.at("general.scalars");
    ASSERT_EQ(sc.size(), 9u);
    EXPECT_TRUE(sc[0][0].is_number_unsigned());
    EXPECT_EQ(sc[0][0].get<int>(), 200);
    EXPECT_EQ(sc[1][0].get<int>(), -5);
    EXPECT_EQ(sc[2][0].get<int>(), 65535);
    EXPECT_EQ(sc[3][0].get<int>(), -300);
    EXPECT_EQ(sc[4][0].get<int>(), -70000);
    EXPECT_EQ(sc[5][0].get<std::int64_t>(), -5'000'000'000);
    EXPECT_EQ(sc[6][0].get<double>(), 0.1);
    EXPECT_EQ(sc[7][0].get<double>(), static_cast<double>(0.1f));  // a float32 widened exactly
    EXPECT_EQ(sc[8][0], false);
    EXPECT_NO_THROW((void)m.dump());
}

TEST(GgufReader, ParsesV2AndCustomAlignment) {
    auto s = valid_spec();
    s.version = 2;
    EXPECT_EQ(parse(build(s)).version, 2u);

    s.kvs.push_back(kv_u32("general.alignment", 64));
    s.alignment = 64;
    s.tis = {{"x", {8}, kTF32, 0}, {"y", {8}, kTF32, 64}};
    s.data.assign(96, std::byte{0});
    const auto f = parse(build(s));
    EXPECT_EQ(f.alignment, 64u);
    EXPECT_EQ(f.data_offset % 64, 0u);
    EXPECT_EQ(f.tensors[1].offset, f.data_offset + 64);
}

TEST(GgufReader, NoTensorsAndZeroSizedTensors) {
    Spec s;
    s.kvs.push_back(kv_str("general.architecture", "x"));
    EXPECT_TRUE(parse(build(s)).tensors.empty());
    s.tis = {{"empty", {0, 4}, kTF32, 0}, {"one", {1}, kTF32, 0}};
    s.data.assign(4, std::byte{0});
    const auto f = parse(build(s));
    EXPECT_EQ(f.tensors[0].nbytes, 0u);
    EXPECT_EQ(f.tensors[0].shape, (std::vector<std::int64_t>{4, 0}));
}

TEST(GgufReader, OpensFileAndSetsMapping) {
    const auto bytes = build(valid_spec());
    const auto path = (std::filesystem::temp_directory_path() / "diffract_gguf_reader_test.gguf").string();
    {
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    const auto f = open_gguf(path);
    ASSERT_NE(f.file, nullptr);
    ASSERT_EQ(f.tensors.size(), 4u);
    EXPECT_EQ(f.tensors[0].file, f.file);
    EXPECT_EQ(f.tensors[0].path(), path);
    float v[6];
    std::memcpy(v, f.tensors[0].bytes().data(), sizeof v);
    EXPECT_EQ(v[5], 6.0f);
    std::remove(path.c_str());
}

TEST(GgufReader, DequantizesQ8_0) {
    const auto s = valid_spec();
    const auto bytes = build(s);
    const auto f = parse(bytes);
    const auto& t = f.tensors[2];
    std::vector<float> out(64);
    dequantize_blocks(bytes.data() + t.offset, DType::Q8_0, out.size(), out.data());
    EXPECT_EQ(out[0], -8.0f);    // 0.5 * -16
    EXPECT_EQ(out[17], 0.5f);    // 0.5 * 1
    EXPECT_EQ(out[31], 7.5f);    // 0.5 * 15
    EXPECT_EQ(out[32], 31.75f);  // 0.25 * 127
    EXPECT_EQ(out[63], 24.0f);   // 0.25 * 96
    EXPECT_THROW(dequantize_blocks(bytes.data(), DType::Q8_0, 33, out.data()), std::invalid_argument);
}

TEST(GgufReader, TypeTableMatchesGgml) {
    using gguf_detail::find_ggml_type;
    EXPECT_EQ(find_ggml_type(4), nullptr);
    EXPECT_EQ(find_ggml_type(5), nullptr);
    EXPECT_EQ(find_ggml_type(42), nullptr);
    const struct {
        std::uint32_t id;
        std::string_view name;
        std::uint32_t block, size;
    } expect[] = {
        {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
        {9, "Q8_1", 32, 36},     {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},
        {13, "Q5_K", 256, 176},  {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
        {17, "IQ2_XS", 256, 74}, {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},
        {21, "IQ3_S", 256, 110}, {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {29, "IQ1_M", 256, 56},
        {34, "TQ1_0", 256, 54},  {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
        {41, "Q1_0", 128, 18}};
    for (const auto& e : expect) {
        const auto* t = find_ggml_type(e.id);
        ASSERT_NE(t, nullptr) << e.id;
        EXPECT_EQ(t->name, e.name);
        EXPECT_EQ(t->block_size, e.block) << e.name;
        EXPECT_EQ(t->type_size, e.size) << e.name;
        // Decoded types carry a DType whose block geometry is ggml's; the others are listed only.
        if (t->dtype) {
            EXPECT_EQ(dtype_name(*t->dtype), e.name);
            EXPECT_EQ(dtype_block_size(*t->dtype), e.block) << e.name;
            EXPECT_EQ(dtype_size(*t->dtype), e.size) << e.name;
        } else {
            EXPECT_TRUE(e.name == "Q8_1" || e.name == "Q8_K" || e.name == "Q1_0") << e.name;
        }
    }
}

TEST(GgufReader, EveryTruncationIsAnInputError) {
    const auto bytes = build(valid_spec());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        const Bytes cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
        EXPECT_THROW(parse(cut), InputError) << "truncated to " << n << " bytes";
    }
}

// ---- Broken inputs ------------------------------------------------------------------------------

TEST(GgufReader, RejectsBadHeader) {
    auto s = valid_spec();
    s.magic = 0x46554746;  // "FGUF"
    EXPECT_GGUF_ERROR(build(s), "bad magic (expected \"GGUF\", found \"FGUF\")");
    s = valid_spec();
    s.version = 1;
    EXPECT_GGUF_ERROR(build(s), "GGUF version 1 is not supported");
    s.version = 4;
    EXPECT_GGUF_ERROR(build(s), "unsupported GGUF version (expected 2 or 3, found 4)");
    s.version = 0x03000000;
    EXPECT_GGUF_ERROR(build(s), "big-endian");
    EXPECT_GGUF_ERROR(Bytes(3), "file too short for the GGUF magic");
}

TEST(GgufReader, RejectsTruncationInEachSection) {
    const auto bytes = build(valid_spec());
    auto cut = [&](std::size_t n) {
        return Bytes(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    };
    EXPECT_GGUF_ERROR(cut(6), "truncated version");
    EXPECT_GGUF_ERROR(cut(12), "truncated tensor count");
    EXPECT_GGUF_ERROR(cut(20), "truncated metadata count");
    // Inside a key/value: right after the key string, then inside the value string. (A file with one key:
    // in the full file, cutting this early already fails the metadata count bound.)
    Spec one;
    one.kvs.push_back(kv_str("general.architecture", "llama"));
    const auto small = build(one);
    const auto key_end = find_bytes(small, "general.architecture") + std::strlen("general.architecture");
    EXPECT_GGUF_ERROR(Bytes(small.begin(), small.begin() + static_cast<std::ptrdiff_t>(key_end)),
                      "metadata key 'general.architecture': truncated value type");
    EXPECT_GGUF_ERROR(Bytes(small.begin(), small.begin() + static_cast<std::ptrdiff_t>(key_end + 4 + 8 + 2)),
                      "metadata key 'general.architecture': string length runs past");
    EXPECT_GGUF_ERROR(cut(40), "metadata count too large for the file");
    // Inside a tensor info: after the name, after n_dims, after ne.
    const auto name_end = find_bytes(bytes, "token_embd.weight") + std::strlen("token_embd.weight");
    EXPECT_GGUF_ERROR(cut(name_end), "tensor 'token_embd.weight': truncated n_dims");
    EXPECT_GGUF_ERROR(cut(name_end + 4 + 8), "tensor 'token_embd.weight': truncated dimensions");
    EXPECT_GGUF_ERROR(cut(name_end + 4 + 16 + 4), "tensor 'token_embd.weight': truncated data offset");
    // In the data section: the last tensor no longer fits.
    EXPECT_GGUF_ERROR(cut(bytes.size() - 1), "tensor 'output.weight': data runs past the end of the file");
}

TEST(GgufReader, RejectsStringLengthPastEnd) {
    auto bytes = build(valid_spec());
    const auto key = find_bytes(bytes, "general.architecture");
    const std::uint64_t huge = 1'000'000;
    std::memcpy(bytes.data() + key - 8, &huge, 8);
    EXPECT_GGUF_ERROR(bytes, "metadata key #0: key length runs past the end of the file (expected at most");

    Spec s;
    s.tis.push_back({"x", {1}, kTF32, 0});
    s.data.resize(4);
    auto b2 = build(s);
    const auto name = find_bytes(b2, "x");
    const std::uint64_t minus_one = ~0ull;
    std::memcpy(b2.data() + name - 8, &minus_one, 8);
    EXPECT_GGUF_ERROR(b2, "tensor info #0: tensor name length runs past the end of the file");
}

TEST(GgufReader, RejectsHugeCounts) {
    auto s = valid_spec();
    s.tensor_count = 1ull << 60;
    EXPECT_GGUF_ERROR(build(s), "tensor count too large for the file");
    s = valid_spec();
    s.kv_count = ~0ull;
    EXPECT_GGUF_ERROR(build(s), "metadata count too large for the file");
    s = valid_spec();
    s.kvs.push_back(kv_raw("general.huge", [](Bytes& b) {
        put(b, kArr);
        put(b, kStr);
        put<std::uint64_t>(b, 1ull << 62);
    }));
    EXPECT_GGUF_ERROR(build(s), "metadata key 'general.huge': array length too large for the file");
    s = valid_spec();
    s.tensor_count = 5;  // one more than there are: runs into the data section
    EXPECT_THROW(parse(build(s)), InputError);
}

TEST(GgufReader, RejectsBadMetadataValues) {
    auto with = [](Kv kv) {
        auto s = valid_spec();
        s.kvs.push_back(std::move(kv));
        return build(s);
    };
    EXPECT_GGUF_ERROR(with(kv_raw("general.x", [](Bytes& b) { put<std::uint32_t>(b, 13); })),
                      "metadata key 'general.x': unknown value type (expected 0..12, found 13)");
    EXPECT_GGUF_ERROR(with(kv_raw("general.x",
                                  [](Bytes& b) {
                                      put(b, kArr);
                                      put<std::uint32_t>(b, 99);
                                      put<std::uint64_t>(b, 0);
                                  })),
                      "unknown array element type (expected 0..12, found 99)");
    EXPECT_GGUF_ERROR(with(kv_raw("general.x",
                                  [](Bytes& b) {
                                      put(b, kBool);
                                      put<std::uint8_t>(b, 2);
                                  })),
                      "bool value is not 0 or 1");
    EXPECT_GGUF_ERROR(with(kv_raw("general.deep",
                                  [](Bytes& b) {
                                      put(b, kArr);
                                      for (int i = 0; i < 9; ++i) {
                                          put(b, kArr);
                                          put<std::uint64_t>(b, 1);
                                      }
                                      put(b, kU8);
                                      put<std::uint64_t>(b, 0);
                                  })),
                      "arrays nested too deeply (expected at most 8 levels, found 9)");
    EXPECT_GGUF_ERROR(with(kv_str("bad\xff.key", "v")), "is not valid UTF-8");
    EXPECT_GGUF_ERROR(with(kv_u32("general.architecture", 7)),
                      "metadata key 'general.architecture': duplicate key");
}

TEST(GgufReader, SanitisesInvalidUtf8InStringValues) {
    auto s = valid_spec();
    s.kvs.push_back(kv_str("general.name",
                           "a\xff"
                           "b"));
    const auto f = parse(build(s));
    EXPECT_EQ(f.metadata.at("general.name"),
              "a\xEF\xBF\xBD"
              "b");
    EXPECT_NO_THROW((void)f.metadata.dump());
}

TEST(GgufReader, RejectsSpecialKeysOfWrongTypeOrValue) {
    for (std::uint32_t a : {0u, 48u, 3u}) {
        auto s = valid_spec();
        s.kvs.push_back(kv_u32("general.alignment", a));
        EXPECT_GGUF_ERROR(build(s),
                          "metadata key 'general.alignment': alignment is not a non-zero power of two");
    }
    auto s = valid_spec();
    s.kvs.push_back(kv_raw("general.alignment", [](Bytes& b) {
        put(b, kU64);
        put<std::uint64_t>(b, 32);
    }));
    EXPECT_GGUF_ERROR(build(s), "wrong value type (expected UINT32, found UINT64)");
    s = valid_spec();
    s.kvs[0] = kv_u32("general.architecture", 1);
    EXPECT_GGUF_ERROR(
        build(s), "metadata key 'general.architecture': wrong value type (expected STRING, found UINT32)");
}

TEST(GgufReader, RejectsBadTensorInfos) {
    auto with = [](auto edit) {
        auto s = valid_spec();
        edit(s);
        return build(s);
    };
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[1].name = s.tis[0].name; }),
                      "tensor 'blk.0.attn_q.weight': duplicate tensor name");
    EXPECT_GGUF_ERROR(
        with([](Spec& s) { s.tis[1].type = 99; }),
        "tensor 'blk.0.attn_norm.weight': unknown ggml type id (expected a known ggml type, found 99)");
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[1].type = 4; }), "unknown ggml type id");
    EXPECT_GGUF_ERROR(with([](Spec& s) {
                          s.tis[1].ne = {1, 1, 1, 1, 4};
                      }),
                      "n_dims out of range (expected 1..4, found 5)");
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[1].ne = {}; }),
                      "n_dims out of range (expected 1..4, found 0)");
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[1].ne = {~0ull}; }), "dimension ne[0] is negative as int64");
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[1].ne = {1ull << 32, 1ull << 32}; }), "overflows int64");
    EXPECT_GGUF_ERROR(
        with([](Spec& s) {
            s.tis[2].ne = {33, 2};
        }),
        "tensor 'token_embd.weight': row length is not a multiple of the Q8_0 block size (expected a "
        "multiple of 32, found 33)");
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[0].name = "bad\xc0\x80"; }), "is not valid UTF-8");
    // A name with a newline is escaped, so that the message stays on one line.
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[0].name = s.tis[1].name = "a\nb"; }),
                      "tensor 'a\\x0ab': duplicate tensor name");
}

TEST(GgufReader, RejectsBadTensorOffsets) {
    auto with = [](auto edit) {
        auto s = valid_spec();
        edit(s);
        return build(s);
    };
    EXPECT_GGUF_ERROR(
        with([](Spec& s) { s.tis[1].offset = 36; }),
        "tensor 'blk.0.attn_norm.weight': data offset is not a multiple of the alignment (expected a "
        "multiple of 32, found 36)");
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[3].offset = 192; }),
                      "tensor 'output.weight': data runs past the end of the file");
    EXPECT_GGUF_ERROR(with([](Spec& s) { s.tis[3].offset = ~0ull - 31; }),
                      "data runs past the end of the file");
    EXPECT_GGUF_ERROR(
        with([](Spec& s) { s.tis[1].offset = 0; }),
        "tensor 'blk.0.attn_q.weight': data overlaps tensor 'blk.0.attn_norm.weight' (expected begin >= ");
    // Overlap is found whatever the order of the infos.
    EXPECT_GGUF_ERROR(with([](Spec& s) {
                          s.tis[0].offset = 64;
                          s.tis[2].offset = 0;
                      }),
                      "data overlaps tensor");
}

// llama.cpp's converter stores the two halves of each Q/K head interleaved (LlamaModel.permute); the
// reader marks those tensors so that rows read in the Hugging Face order.
TEST(GgufReader, UndoesTheRopeLayoutOfLlamaQK) {
    for (const std::string arch : {"llama", "qwen2"}) {
        Spec s;
        s.kvs.push_back(kv_str("general.architecture", arch));
        s.kvs.push_back(kv_u32(arch + ".attention.head_count", 2));
        s.kvs.push_back(kv_u32(arch + ".attention.head_count_kv", 1));
        s.tis.push_back({"blk.0.attn_q.weight", {1, 8}, kTF32, 0});   // 2 heads of 4 rows
        s.tis.push_back({"blk.0.attn_k.weight", {1, 4}, kTF32, 32});  // 1 head of 4 rows
        s.tis.push_back({"blk.0.attn_v.weight", {1, 4}, kTF32, 64});
        s.tis.push_back({"blk.0.attn_q.bias", {8}, kTF32, 96});
        s.data.resize(128);
        const auto f = parse(build(s));
        const bool permuted = arch == "llama";
        EXPECT_EQ(gguf_rope_permuted(arch), permuted);
        EXPECT_EQ(f.tensors[0].rope_head_rows, permuted ? 4 : 0);
        EXPECT_EQ(f.tensors[1].rope_head_rows, permuted ? 4 : 0);
        EXPECT_EQ(f.tensors[2].rope_head_rows, 0);
        EXPECT_EQ(f.tensors[3].rope_head_rows, permuted ? 4 : 0);
        // HF rows [0 1 | 2 3] of a head are stored as [0 2 1 3]: logical row r is at stored_row(r).
        std::vector<std::int64_t> rows;
        for (std::int64_t r = 0; r < 8; ++r) rows.push_back(f.tensors[0].stored_row(r));
        EXPECT_EQ(rows, permuted ? (std::vector<std::int64_t>{0, 2, 1, 3, 4, 6, 5, 7})
                                 : (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    }
}

TEST(GgufReader, RopeLayoutNeedsHeadsOfAnEvenRowCount) {
    Spec s;
    s.kvs.push_back(kv_str("general.architecture", "llama"));
    s.kvs.push_back(kv_u32("llama.attention.head_count", 4));
    s.tis.push_back({"blk.0.attn_q.weight", {1, 4}, kTF32, 0});  // heads of one row: left as stored
    s.data.resize(32);
    EXPECT_EQ(parse(build(s)).tensors[0].rope_head_rows, 0);
}
