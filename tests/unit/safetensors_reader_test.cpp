// The malformed-file corpus for the safetensors reader: one named defect per validation rule, each
// built deterministically in memory, each asserting the specific error text.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "diffract/core/error.hpp"
#include "diffract/formats/safetensors.hpp"

using namespace diffract;
using namespace diffract::formats;

namespace {

std::vector<std::byte> file_with_header(const std::string& header, std::size_t data_bytes,
                                        std::uint64_t declared_len = UINT64_MAX) {
    const std::uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
    std::vector<std::byte> f(8 + header.size() + data_bytes);
    for (int i = 0; i < 8; ++i)
        f[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
    std::memcpy(f.data() + 8, header.data(), header.size());
    return f;
}

std::string error_of(const std::vector<std::byte>& bytes) {
    try {
        parse_safetensors(bytes, "test.safetensors");
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

#define EXPECT_ERROR(bytes, text)                                   \
    do {                                                            \
        const auto msg = error_of(bytes);                           \
        EXPECT_NE(msg.find(text), std::string::npos) << msg;        \
        EXPECT_NE(msg.find("test.safetensors"), std::string::npos); \
    } while (0)

const std::string kGood =
    R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},"__metadata__":{"format":"pt"}})";

}  // namespace

TEST(SafetensorsReader, ParsesAValidFile) {
    const auto h = parse_safetensors(file_with_header(kGood, 22), "test.safetensors");
    ASSERT_EQ(h.tensors.size(), 2u);
    EXPECT_EQ(h.tensors[0].name, "a");
    EXPECT_EQ(h.tensors[1].dtype, DType::BF16);
    EXPECT_EQ(h.tensors[1].shape, std::vector<std::int64_t>{3});
    EXPECT_EQ(h.metadata.at("format"), "pt");
    EXPECT_EQ(h.data_start(), 8 + kGood.size());
}

TEST(SafetensorsReader, AcceptsEmptyHeaderAndZeroSizedTensors) {
    EXPECT_NO_THROW(parse_safetensors(file_with_header("{}", 0), "x"));
    EXPECT_NO_THROW(parse_safetensors(
        file_with_header(R"({"z":{"dtype":"F16","shape":[0,4],"data_offsets":[0,0]}})", 0), "x"));
}

TEST(SafetensorsReader, RejectsTooShortFile) { EXPECT_ERROR(std::vector<std::byte>(5), "file too short"); }

TEST(SafetensorsReader, RejectsHeaderLengthOver100MB) {
    EXPECT_ERROR(file_with_header("{}", 0, 100'000'001), "exceeds the 100 MB limit");
}

TEST(SafetensorsReader, RejectsHeaderLengthPastEndOfFile) {
    EXPECT_ERROR(file_with_header("{}", 0, 4096), "runs past the end of the file");
}

TEST(SafetensorsReader, RejectsInvalidJson) {
    EXPECT_ERROR(file_with_header("{\"a\":", 0), "not valid JSON");
}

TEST(SafetensorsReader, RejectsNonObjectHeader) {
    EXPECT_ERROR(file_with_header("[1,2]", 0), "not a JSON object");
}

TEST(SafetensorsReader, RejectsUnknownDtype) {
    EXPECT_ERROR(file_with_header(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16),
                 "unknown dtype 'F128'");
}

TEST(SafetensorsReader, RejectsNegativeShape) {
    EXPECT_ERROR(file_with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                 "negative dimension");
}

TEST(SafetensorsReader, RejectsOverflowingShape) {
    EXPECT_ERROR(file_with_header(
                     R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4),
                 "overflows");
}

TEST(SafetensorsReader, RejectsByteLengthMismatch) {
    const auto msg =
        error_of(file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12));
    EXPECT_NE(msg.find("tensor 'a'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected 8, found 12"), std::string::npos) << msg;
}

TEST(SafetensorsReader, RejectsOffsetsPastDataSection) {
    EXPECT_ERROR(file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
                 "run past the data section");
}

TEST(SafetensorsReader, RejectsReversedOffsets) {
    EXPECT_ERROR(file_with_header(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
                 "end before begin");
}

TEST(SafetensorsReader, RejectsOverlap) {
    EXPECT_ERROR(
        file_with_header(
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12),
        "overlaps");
}

TEST(SafetensorsReader, RejectsHole) {
    EXPECT_ERROR(
        file_with_header(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            12),
        "hole");
}

TEST(SafetensorsReader, RejectsTrailingBytes) {
    EXPECT_ERROR(file_with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
                 "data section size does not match");
}

TEST(SafetensorsReader, RejectsDuplicateNames) {
    EXPECT_ERROR(
        file_with_header(
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            8),
        "duplicate tensor name");
}

TEST(SafetensorsReader, RejectsNonStringMetadata) {
    EXPECT_ERROR(file_with_header(R"({"__metadata__":{"k":1}})", 0), "is not a string");
    EXPECT_ERROR(file_with_header(R"({"__metadata__":[1]})", 0), "__metadata__ is not an object");
}

TEST(SafetensorsReader, RejectsMalformedEntries) {
    EXPECT_ERROR(file_with_header(R"({"a":1})", 0), "not a JSON object");
    EXPECT_ERROR(file_with_header(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "'dtype'");
    EXPECT_ERROR(file_with_header(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "'shape'");
    EXPECT_ERROR(file_with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
                 "'data_offsets'");
    EXPECT_ERROR(file_with_header(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                 "non-integer");
}
