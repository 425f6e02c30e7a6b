// The malformed-input corpus for model.safetensors.index.json.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "diffract/core/error.hpp"
#include "diffract/formats/shard_index.hpp"

using namespace diffract;

namespace {

std::string error_of(const std::string& text) {
    std::vector<std::byte> bytes(text.size());
    std::memcpy(bytes.data(), text.data(), text.size());
    try {
        formats::parse_shard_index(bytes, "index.json");
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(ShardIndex, ParsesWeightMap) {
    const std::string text =
        R"({"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
    std::vector<std::byte> bytes(text.size());
    std::memcpy(bytes.data(), text.data(), text.size());
    const auto idx = formats::parse_shard_index(bytes, "index.json");
    EXPECT_EQ(idx.weight_map.size(), 2u);
    EXPECT_EQ(idx.weight_map.at("b"), "model-00002-of-00002.safetensors");
}

TEST(ShardIndex, RejectsEachDefect) {
    EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
    EXPECT_NE(error_of("[]").find("not a JSON object"), std::string::npos);
    EXPECT_NE(error_of("{}").find("no 'weight_map'"), std::string::npos);
    EXPECT_NE(error_of(R"({"weight_map":{}})").find("weight_map is empty"), std::string::npos);
    EXPECT_NE(error_of(R"({"weight_map":{"a":3}})").find("tensor 'a'"), std::string::npos);
    const auto escape = error_of(R"({"weight_map":{"a":"../secret.safetensors"}})");
    EXPECT_NE(escape.find("not a file in the model directory"), std::string::npos) << escape;
    EXPECT_NE(error_of(R"({"weight_map":{"a":"/etc/passwd"}})").find("not a file in the model directory"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"weight_map":{"a":".."}})").find("index.json: tensor 'a'"), std::string::npos);
}
