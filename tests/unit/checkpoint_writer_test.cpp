#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "diffract/core/error.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/formats/checkpoint_writer.hpp"

namespace fs = std::filesystem;
using namespace diffract;
using namespace diffract::formats;

namespace {

struct TempDir {
    fs::path path = fs::temp_directory_path() /
                    ("diffract_writer_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                     "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    TempDir() { fs::remove_all(path), fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

std::vector<TensorSpec> specs() {
    return {{"a", DType::F32, {4, 4}}, {"b", DType::BF16, {8, 2}}, {"c", DType::F16, {3}}};
}

void fill_index(const TensorSpec& s, std::span<std::byte> out) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>((i * 7 + s.name[0]) & 0xFF);
}

}  // namespace

TEST(CheckpointWriter, WritesShardsWithIndexThatReadBack) {
    TempDir tmp;
    WriteOptions o;
    o.max_shard_bytes = 40;  // a: 64 bytes alone, then b + c
    o.config = {{"model_type", "llama"}};
    write_checkpoint((tmp.path / "out").string(), specs(), fill_index, o);
    EXPECT_TRUE(fs::exists(tmp.path / "out" / "model.safetensors.index.json"));
    EXPECT_TRUE(fs::exists(tmp.path / "out" / "model-00002-of-00002.safetensors"));
    const auto ck = open_checkpoint((tmp.path / "out").string());
    ASSERT_EQ(ck.tensors.size(), 3u);
    const auto* b = ck.find("b");
    ASSERT_NE(b, nullptr);
    std::vector<std::byte> expected(b->nbytes);
    fill_index(specs()[1], expected);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), b->bytes().begin()));
    EXPECT_EQ(ck.config["model_type"], "llama");
}

TEST(CheckpointWriter, FailureHalfwayLeavesNothingBehind) {
    TempDir tmp;
    auto failing = [](const TensorSpec& s, std::span<std::byte> out) {
        if (s.name == "c") throw InputError("producer failed");
        fill_index(s, out);
    };
    EXPECT_THROW(write_checkpoint((tmp.path / "out").string(), specs(), failing, {}), InputError);
    EXPECT_FALSE(fs::exists(tmp.path / "out"));
    EXPECT_TRUE(fs::is_empty(tmp.path));  // no temporary directory left either
}

TEST(CheckpointWriter, RefusesToOverwriteOrNestInAnInput) {
    TempDir tmp;
    fs::create_directories(tmp.path / "in");
    std::ofstream(tmp.path / "in" / "keep.txt") << "x";
    WriteOptions o;
    o.inputs = {(tmp.path / "in").string()};
    EXPECT_THROW(write_checkpoint((tmp.path / "in").string(), specs(), fill_index, o), InputError);
    EXPECT_THROW(write_checkpoint((tmp.path / "in" / "sub").string(), specs(), fill_index, o), InputError);
    EXPECT_TRUE(fs::exists(tmp.path / "in" / "keep.txt"));
    EXPECT_FALSE(fs::exists(tmp.path / "in" / "sub"));
}
