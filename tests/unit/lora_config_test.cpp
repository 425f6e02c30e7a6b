// PEFT's layers_to_transform / layers_pattern rule (peft/tuners/tuners_utils.py,
// check_target_module_exists): the layer index is the number after the last ".<pattern>." of the module
// name, re.match(r".*\.{pattern}\.(\d+)\."), or without a pattern after the last ".<component>."
// (r".*\.[^.]*\.(\d+)\."). The expected indices below are what those expressions give in Python.
#include <gtest/gtest.h>

#include <string>

#include "diffract/core/error.hpp"
#include "diffract/formats/lora_adapter.hpp"

namespace diffract::formats {
namespace {

LoraConfig config(const std::string& extra) {
    const std::string text = R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4)" + extra + "}";
    return parse_lora_config({reinterpret_cast<const std::byte*>(text.data()), text.size()},
                             "adapter_config.json");
}

TEST(LoraConfig, LayersToTransformFollowsPeftsExpressions) {
    // No pattern: the greedy ".*" takes the last "<component>.<digits>." — the expert, not the layer.
    EXPECT_TRUE(
        config(R"(, "layers_to_transform": [5])").transforms_layer("model.layers.3.mlp.experts.5.gate_proj"));
    EXPECT_FALSE(
        config(R"(, "layers_to_transform": [3])").transforms_layer("model.layers.3.mlp.experts.5.gate_proj"));
    // With a pattern, the number after it.
    EXPECT_TRUE(config(R"(, "layers_to_transform": 3, "layers_pattern": "layers")")
                    .transforms_layer("model.layers.3.mlp.experts.5.gate_proj"));
    EXPECT_TRUE(config(R"(, "layers_to_transform": [7], "layers_pattern": ["h", "blocks"])")
                    .transforms_layer("model.decoder.layers.0.blocks.7.fc"));
    // A number that ends the name, or one at the start (no "." before its container), is no layer.
    EXPECT_FALSE(config(R"(, "layers_to_transform": [2])").transforms_layer("h.2.attn"));
    EXPECT_TRUE(config(R"(, "layers_to_transform": [2])").transforms_layer("transformer.h.2.attn"));
    EXPECT_FALSE(config(R"(, "layers_to_transform": [2])").transforms_layer("model.embed.2"));
    EXPECT_FALSE(config(R"(, "layers_to_transform": [2], "layers_pattern": "h")")
                     .transforms_layer("model.layers.2.q"));
    // No layers_to_transform: every module.
    EXPECT_TRUE(config("").transforms_layer("anything"));
}

TEST(LoraConfig, PeftsRefusalsAreOneLine) {
    const std::string text = R"({"r": 2, "lora_alpha": 4})";
    EXPECT_THROW(parse_lora_config({reinterpret_cast<const std::byte*>(text.data()), text.size()}, "a.json"),
                 InputError);
    EXPECT_THROW(config(R"(, "layers_to_transform": [-1])"), InputError);
    EXPECT_THROW(config(R"(, "layers_to_transform": "0")"), InputError);
    EXPECT_THROW(config(R"(, "layers_pattern": 3)"), InputError);
}

}  // namespace
}  // namespace diffract::formats
