#include <gtest/gtest.h>

#include "diffract/core/error.hpp"
#include "diffract/model/schema.hpp"

using namespace diffract;
using namespace diffract::model;

namespace {

Role role_of(const char* name) { return classify_tensor(name).role; }

TensorInfo tensor(const char* name, std::vector<std::int64_t> shape) {
    TensorInfo t;
    t.name = name;
    t.shape = std::move(shape);
    t.file = nullptr;
    return t;
}

}  // namespace

TEST(Schema, ClassifiesHfAndGgufNames) {
    EXPECT_EQ(role_of("model.layers.3.self_attn.q_proj.weight"), Role::attn_q);
    EXPECT_EQ(classify_tensor("model.layers.3.self_attn.q_proj.weight").layer, 3);
    EXPECT_EQ(role_of("model.layers.0.self_attn.o_proj.weight"), Role::attn_o);
    EXPECT_EQ(role_of("model.layers.0.self_attn.q_norm.weight"), Role::norm);
    EXPECT_EQ(role_of("model.layers.0.mlp.gate_proj.weight"), Role::mlp_gate);
    EXPECT_EQ(role_of("model.layers.0.mlp.down_proj.weight"), Role::mlp_down);
    EXPECT_EQ(role_of("model.embed_tokens.weight"), Role::embed);
    EXPECT_EQ(role_of("lm_head.weight"), Role::lm_head);
    EXPECT_FALSE(classify_tensor("lm_head.weight").layer.has_value());
    // Phi-3
    EXPECT_EQ(role_of("model.layers.1.self_attn.qkv_proj.weight"), Role::attn_qkv);
    EXPECT_EQ(role_of("model.layers.1.mlp.gate_up_proj.weight"), Role::mlp_gate_up);
    // GPT-2
    EXPECT_EQ(role_of("transformer.h.5.attn.c_attn.weight"), Role::attn_qkv);
    EXPECT_EQ(classify_tensor("transformer.h.5.attn.c_attn.weight").layer, 5);
    EXPECT_EQ(role_of("transformer.h.5.attn.c_proj.weight"), Role::attn_o);
    EXPECT_EQ(role_of("transformer.h.5.mlp.c_fc.weight"), Role::mlp_up);
    EXPECT_EQ(role_of("transformer.h.5.mlp.c_proj.weight"), Role::mlp_down);
    EXPECT_EQ(role_of("transformer.wte.weight"), Role::embed);
    EXPECT_EQ(role_of("transformer.h.5.ln_1.weight"), Role::norm);
    // GPT-NeoX
    EXPECT_EQ(role_of("gpt_neox.layers.2.attention.query_key_value.weight"), Role::attn_qkv);
    EXPECT_EQ(role_of("gpt_neox.layers.2.attention.dense.weight"), Role::attn_o);
    EXPECT_EQ(role_of("gpt_neox.layers.2.mlp.dense_h_to_4h.weight"), Role::mlp_up);
    EXPECT_EQ(role_of("gpt_neox.layers.2.mlp.dense_4h_to_h.weight"), Role::mlp_down);
    EXPECT_EQ(role_of("embed_out.weight"), Role::lm_head);
    // BERT
    EXPECT_EQ(role_of("bert.encoder.layer.4.attention.self.query.weight"), Role::attn_q);
    EXPECT_EQ(role_of("bert.encoder.layer.4.attention.output.dense.weight"), Role::attn_o);
    EXPECT_EQ(role_of("bert.encoder.layer.4.intermediate.dense.weight"), Role::mlp_up);
    EXPECT_EQ(role_of("bert.encoder.layer.4.output.dense.weight"), Role::mlp_down);
    EXPECT_EQ(role_of("bert.encoder.layer.4.attention.output.LayerNorm.weight"), Role::norm);
    // llama.cpp GGUF
    EXPECT_EQ(role_of("blk.7.attn_q.weight"), Role::attn_q);
    EXPECT_EQ(classify_tensor("blk.7.attn_q.weight").layer, 7);
    EXPECT_EQ(role_of("blk.7.attn_output.weight"), Role::attn_o);
    EXPECT_EQ(role_of("blk.7.ffn_gate.weight"), Role::mlp_gate);
    EXPECT_EQ(role_of("token_embd.weight"), Role::embed);
    EXPECT_EQ(role_of("output.weight"), Role::lm_head);
    EXPECT_EQ(role_of("output_norm.weight"), Role::norm);
    EXPECT_EQ(role_of("some.unrelated.tensor"), Role::other);
}

TEST(Schema, ClassifiesT5FalconBloomAndOptNames) {
    // T5: the feed-forward's wo is its down projection, never an attention output; bare q/k/v/o are
    // attention inside SelfAttention/EncDecAttention only.
    EXPECT_EQ(role_of("encoder.block.0.layer.1.DenseReluDense.wo.weight"), Role::mlp_down);
    EXPECT_EQ(role_of("encoder.block.0.layer.1.DenseReluDense.wi.weight"), Role::mlp_up);
    EXPECT_EQ(role_of("decoder.block.1.layer.2.DenseReluDense.wi_0.weight"), Role::mlp_gate);
    EXPECT_EQ(role_of("decoder.block.1.layer.2.DenseReluDense.wi_1.weight"), Role::mlp_up);
    EXPECT_EQ(role_of("encoder.block.0.layer.0.SelfAttention.q.weight"), Role::attn_q);
    EXPECT_EQ(role_of("decoder.block.0.layer.1.EncDecAttention.k.weight"), Role::attn_k);
    EXPECT_EQ(role_of("decoder.block.0.layer.1.EncDecAttention.v.weight"), Role::attn_v);
    EXPECT_EQ(role_of("encoder.block.0.layer.0.SelfAttention.o.weight"), Role::attn_o);
    EXPECT_EQ(role_of("shared.weight"), Role::embed);
    EXPECT_EQ(role_of("model.layers.2.attention.wo.weight"), Role::attn_o);  // Llama-style wo stays
    // Falcon/BLOOM attention output, OPT's MLP and learned positions.
    EXPECT_EQ(role_of("transformer.h.0.self_attention.dense.weight"), Role::attn_o);
    EXPECT_EQ(role_of("model.decoder.layers.0.fc1.weight"), Role::mlp_up);
    EXPECT_EQ(role_of("model.decoder.layers.0.fc2.weight"), Role::mlp_down);
    EXPECT_EQ(role_of("model.decoder.embed_positions.weight"), Role::embed);
}

TEST(Schema, OnlyKnownModelTypesSplitHeadsTheLlamaWay) {
    // A variant with another q_proj layout (qwen3_next's gated queries have twice the rows) is not
    // taken for Llama by its prefix: heads unknown with a warning, never a refused checkpoint.
    const nlohmann::json geometry = {
        {"hidden_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
    for (const char* type : {"qwen3_next", "qwen2_audio", "gemma3n", "llamafied"}) {
        auto cfg = geometry;
        cfg["model_type"] = type;
        const auto s = schema_from_config(cfg);
        EXPECT_NE(s.family, "llama") << type;
        EXPECT_FALSE(s.heads.has_value()) << type;
    }
    for (const char* type : {"qwen2", "qwen3_moe", "qwen3moe", "gemma3_text", "olmo2", "llama"}) {
        auto cfg = geometry;
        cfg["model_type"] = type;
        EXPECT_EQ(schema_from_config(cfg).family, "llama") << type;
    }
}

TEST(Schema, ReadsHeadGeometryFromConfig) {
    const auto s = schema_from_config({{"architectures", {"Olmo2ForCausalLM"}},
                                       {"model_type", "olmo2"},
                                       {"hidden_size", 64},
                                       {"num_attention_heads", 8},
                                       {"num_key_value_heads", 2}});
    EXPECT_EQ(s.family, "llama");
    ASSERT_TRUE(s.heads.has_value());
    EXPECT_EQ(s.heads->head_dim, 8);
    EXPECT_EQ(s.heads->group_size(), 4);
    EXPECT_EQ(s.heads->kv_head_of(5), 1);
    const auto unknown = schema_from_config({{"model_type", "mystery"}});
    EXPECT_FALSE(unknown.heads.has_value());
    EXPECT_FALSE(unknown.warnings.empty());
    EXPECT_THROW(
        schema_from_config({{"model_type", "llama"}, {"hidden_size", 10}, {"num_attention_heads", 3}}),
        InputError);
}

TEST(Schema, SplitsSeparateProjectionsWithGqa) {
    const auto s = schema_from_config({{"model_type", "llama"},
                                       {"hidden_size", 64},
                                       {"num_attention_heads", 8},
                                       {"num_key_value_heads", 2}});
    const auto q = head_blocks(s, tensor("model.layers.0.self_attn.q_proj.weight", {64, 64}), Role::attn_q);
    ASSERT_EQ(q.size(), 8u);
    EXPECT_EQ(q[3].block.row0, 24);
    EXPECT_EQ(q[3].block.rows, 8);
    EXPECT_EQ(q[3].block.cols, 64);
    const auto k = head_blocks(s, tensor("model.layers.0.self_attn.k_proj.weight", {16, 64}), Role::attn_k);
    ASSERT_EQ(k.size(), 2u);
    const auto o = head_blocks(s, tensor("model.layers.0.self_attn.o_proj.weight", {64, 64}), Role::attn_o);
    ASSERT_EQ(o.size(), 8u);
    EXPECT_EQ(o[2].block.col0, 16);
    EXPECT_EQ(o[2].block.cols, 8);
    EXPECT_EQ(o[2].block.rows, 64);
    // The config says 8 heads of 8 rows: a 60-row projection does not divide.
    EXPECT_THROW(head_blocks(s, tensor("model.layers.0.self_attn.q_proj.weight", {60, 64}), Role::attn_q),
                 InputError);
}

TEST(Schema, SplitsFusedLayouts) {
    const auto phi =
        schema_from_config({{"model_type", "phi3"}, {"hidden_size", 32}, {"num_attention_heads", 4}});
    const auto qkv =
        head_blocks(phi, tensor("model.layers.0.self_attn.qkv_proj.weight", {96, 32}), Role::attn_qkv);
    ASSERT_EQ(qkv.size(), 12u);
    EXPECT_EQ(qkv[4].proj, Role::attn_k);
    EXPECT_EQ(qkv[4].block.row0, 32);  // k rows follow all q rows
    const auto neox =
        schema_from_config({{"model_type", "gpt_neox"}, {"hidden_size", 32}, {"num_attention_heads", 4}});
    const auto inter = head_blocks(
        neox, tensor("gpt_neox.layers.0.attention.query_key_value.weight", {96, 32}), Role::attn_qkv);
    ASSERT_EQ(inter.size(), 12u);
    EXPECT_EQ(inter[1].block.row0, 24);  // q of head 1: rows [3d, 4d)
    EXPECT_EQ(inter[4].block.row0, 8);   // k of head 0: rows [d, 2d)
    // GPT-2 Conv1D: c_attn stored [in=32, out=96]; head blocks are column ranges, logically transposed.
    const auto gpt2 = schema_from_config({{"model_type", "gpt2"}, {"n_embd", 32}, {"n_head", 4}});
    const auto c_attn = head_blocks(gpt2, tensor("h.0.attn.c_attn.weight", {32, 96}), Role::attn_qkv);
    ASSERT_EQ(c_attn.size(), 12u);
    EXPECT_TRUE(c_attn[0].block.transposed);
    EXPECT_EQ(c_attn[5].block.col0, 40);  // k of head 1: columns [32 + 8, 32 + 16)
    EXPECT_EQ(c_attn[5].block.logical_rows(), 8);
    EXPECT_EQ(c_attn[5].block.logical_cols(), 32);
    const auto c_proj = head_blocks(gpt2, tensor("h.0.attn.c_proj.weight", {32, 32}), Role::attn_o);
    EXPECT_EQ(c_proj[2].block.row0, 16);  // O head 2 = logical columns = stored rows
    EXPECT_EQ(c_proj[2].block.logical_cols(), 8);
}
