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

TEST(Schema, ArchitecturesAreSplitByTheirGeometryNotTheirName) {
    // Any model type that states a head count and a width is split as standard, without a code change;
    // only the exceptions table differs (qwen3_next's gated queries have twice the rows: not split).
    const nlohmann::json geometry = {
        {"hidden_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
    for (const char* type :
         {"qwen2_audio", "gemma3n", "llamafied", "glm4_moe", "cohere2", "brand_new_2026"}) {
        auto cfg = geometry;
        cfg["model_type"] = type;
        const auto s = schema_from_config(cfg);
        EXPECT_EQ(s.family, "standard") << type;
        ASSERT_TRUE(s.heads.has_value()) << type;
        EXPECT_EQ(s.heads->head_dim, 16) << type;
    }
    auto gated = geometry;
    gated["model_type"] = "qwen3_next";
    const auto s = schema_from_config(gated);
    EXPECT_FALSE(s.heads.has_value());
    ASSERT_FALSE(s.warnings.empty());
    EXPECT_NE(s.warnings.front().find("gated"), std::string::npos);
}

TEST(Schema, AnUnverifiedArchitectureWhoseTensorsContradictItsGeometryLosesItsHeadsNotTheModel) {
    auto s = schema_from_config({{"model_type", "brand_new_2026"},
                                 {"hidden_size", 64},
                                 {"num_attention_heads", 4},
                                 {"num_key_value_heads", 2}});
    const std::vector<TensorInfo> ts{tensor("model.layers.0.self_attn.q_proj.weight", {128, 64})};
    check_head_geometry(s, ts);
    EXPECT_FALSE(s.heads.has_value());
    EXPECT_NE(s.warnings.back().find("q_proj"), std::string::npos);
    // A verified type's contradiction stays a refusal (head_blocks throws).
    auto llama = schema_from_config({{"model_type", "llama"},
                                     {"hidden_size", 64},
                                     {"num_attention_heads", 4},
                                     {"num_key_value_heads", 2}});
    check_head_geometry(llama, ts);
    ASSERT_TRUE(llama.heads.has_value());
    EXPECT_THROW(head_blocks(llama, ts[0], Role::attn_q), InputError);
}

TEST(Schema, MultimodalWrappersReadTextConfigAndKeepTowersApart) {
    const nlohmann::json cfg = {
        {"model_type", "gemma3"},
        {"architectures", {"Gemma3ForConditionalGeneration"}},
        {"text_config",
         {{"model_type", "gemma3_text"},
          {"hidden_size", 64},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 24},
          {"num_hidden_layers", 2}}},
        {"vision_config", {{"hidden_size", 32}, {"num_attention_heads", 2}, {"num_hidden_layers", 27}}}};
    auto s = schema_from_config(cfg);
    ASSERT_TRUE(s.heads.has_value());
    EXPECT_EQ(s.heads->head_dim, 24);
    EXPECT_EQ(s.num_layers, 2);
    const auto* v = s.heads_of(Component::vision);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->head_dim, 16);
    const auto vq = tensor("vision_tower.vision_model.encoder.layers.20.self_attn.q_proj.weight", {32, 32});
    const auto r = classify_tensor(vq.name);
    EXPECT_EQ(r.component, Component::vision);
    EXPECT_EQ(r.layer, 20);
    EXPECT_EQ(head_blocks(s, vq, Role::attn_q).size(), 2u);
    EXPECT_EQ(head_blocks(s, tensor("language_model.model.layers.0.self_attn.q_proj.weight", {96, 64}),
                          Role::attn_q)
                  .size(),
              4u);
    EXPECT_EQ(classify_tensor("multi_modal_projector.mm_input_projection_weight").component,
              Component::projector);
    EXPECT_EQ(classify_tensor("model.visual.blocks.3.attn.qkv.weight").component, Component::vision);
    EXPECT_EQ(classify_tensor("model.visual.blocks.3.attn.qkv.weight").role, Role::attn_qkv);
    EXPECT_EQ(classify_tensor("audio_tower.layers.1.self_attn.k_proj.weight").component, Component::audio);
    EXPECT_EQ(classify_tensor("v.blk.3.attn_q.weight").component, Component::vision);
    // A tower whose geometry does not fit loses its heads, never the model.
    check_head_geometry(
        s, {tensor("vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight", {30, 32})});
    EXPECT_EQ(s.heads_of(Component::vision), nullptr);
    EXPECT_NE(s.heads_of(Component::language), nullptr);
}

TEST(Schema, ExpertsRoutersAndSharedExpertsHaveTheirOwnIdentity) {
    auto r = classify_tensor("model.layers.4.mlp.experts.17.down_proj.weight");
    EXPECT_EQ(r.role, Role::mlp_down);
    EXPECT_EQ(r.expert, 17);
    EXPECT_EQ(r.expert_kind, ExpertKind::routed);
    r = classify_tensor("model.layers.4.block_sparse_moe.experts.3.w1.weight");
    EXPECT_EQ(r.role, Role::mlp_gate);
    EXPECT_EQ(r.expert, 3);
    r = classify_tensor("model.layers.4.mlp.shared_experts.up_proj.weight");
    EXPECT_EQ(r.role, Role::mlp_up);
    EXPECT_EQ(r.expert_kind, ExpertKind::shared);
    EXPECT_FALSE(r.expert.has_value());
    r = classify_tensor("model.layers.4.mlp.shared_expert.gate_proj.weight");
    EXPECT_EQ(r.expert_kind, ExpertKind::shared);
    EXPECT_EQ(r.role, Role::mlp_gate);
    r = classify_tensor("blk.4.ffn_down_shexp.weight");
    EXPECT_EQ(r.role, Role::mlp_down);
    EXPECT_EQ(r.expert_kind, ExpertKind::shared);
    for (const char* router :
         {"model.layers.2.mlp.gate.weight", "model.layers.2.block_sparse_moe.gate.weight",
          "model.layers.2.mlp.router.weight", "language_model.model.layers.2.feed_forward.router.weight",
          "blk.2.ffn_gate_inp.weight", "model.layers.2.mlp.gate.e_score_correction_bias"}) {
        EXPECT_EQ(role_of(router), Role::router) << router;
        EXPECT_EQ(classify_tensor(router).expert_kind, ExpertKind::none) << router;
    }
    EXPECT_EQ(role_of("model.layers.2.mlp.shared_expert_gate.weight"), Role::shared_expert_gate);
    EXPECT_EQ(role_of("blk.2.ffn_gate_inp_shexp.weight"), Role::shared_expert_gate);
    EXPECT_EQ(role_of("model.layers.2.mlp.gate_proj.weight"), Role::mlp_gate);  // a dense gate stays one
    EXPECT_EQ(classify_tensor("model.layers.2.mlp.gate_proj.weight").expert_kind, ExpertKind::none);
}

TEST(Schema, LatentAttentionSplitsQueriesKeysValuesAndOutputsPerHead) {
    // DeepSeek-V3 geometry: 4 heads, qk_nope 16 + qk_rope 8, v_head_dim 12, q_lora 40, kv_lora 20.
    const auto s = schema_from_config({{"model_type", "deepseek_v3"},
                                       {"hidden_size", 64},
                                       {"num_attention_heads", 4},
                                       {"num_key_value_heads", 4},
                                       {"head_dim", 8},  // the rotary part, as DeepSeek's configs state it
                                       {"q_lora_rank", 40},
                                       {"kv_lora_rank", 20},
                                       {"qk_nope_head_dim", 16},
                                       {"qk_rope_head_dim", 8},
                                       {"v_head_dim", 12}});
    EXPECT_EQ(s.family, "mla");
    ASSERT_TRUE(s.heads.has_value());
    EXPECT_TRUE(s.heads->latent);
    EXPECT_EQ(s.heads->head_dim, 24);
    const auto q = head_blocks(s, tensor("model.layers.1.self_attn.q_b_proj.weight", {96, 40}), Role::attn_q);
    ASSERT_EQ(q.size(), 4u);
    EXPECT_EQ(q[2].block.row0, 48);
    EXPECT_EQ(q[2].block.rows, 24);
    const auto kv =
        head_blocks(s, tensor("model.layers.1.self_attn.kv_b_proj.weight", {112, 20}), Role::attn_kv_b);
    ASSERT_EQ(kv.size(), 8u);
    for (const auto& b : kv) {
        const std::int64_t start = b.head * 28 + (b.proj == Role::attn_v ? 16 : 0);
        EXPECT_EQ(b.block.row0, start);
        EXPECT_EQ(b.block.rows, b.proj == Role::attn_v ? 12 : 16);
        EXPECT_EQ(b.block.cols, 20);
    }
    const auto o = head_blocks(s, tensor("model.layers.1.self_attn.o_proj.weight", {64, 48}), Role::attn_o);
    ASSERT_EQ(o.size(), 4u);
    EXPECT_EQ(o[3].block.col0, 36);
    EXPECT_EQ(o[3].block.cols, 12);
    EXPECT_TRUE(
        head_blocks(s, tensor("model.layers.1.self_attn.q_a_proj.weight", {40, 64}), Role::attn_q_a).empty());
    EXPECT_EQ(role_of("model.layers.1.self_attn.kv_a_proj_with_mqa.weight"), Role::attn_kv_a);
    EXPECT_EQ(role_of("blk.1.attn_kv_b.weight"), Role::attn_kv_b);
    EXPECT_THROW(
        head_blocks(s, tensor("model.layers.1.self_attn.kv_b_proj.weight", {100, 20}), Role::attn_kv_b),
        InputError);
}

TEST(Schema, GroupedQkvOfFalconAndInternLm2) {
    const auto s = schema_from_config({{"model_type", "falcon"},
                                       {"hidden_size", 64},
                                       {"num_attention_heads", 4},
                                       {"num_kv_heads", 2},
                                       {"new_decoder_architecture", true}});
    EXPECT_EQ(s.qkv_layout, QkvLayout::grouped_by_kv);
    // Group k of 2: rows [q_{2k}; q_{2k+1}; k_k; v_k], 16 each.
    const auto b = head_blocks(s, tensor("transformer.h.0.self_attention.query_key_value.weight", {128, 64}),
                               Role::attn_qkv);
    ASSERT_EQ(b.size(), 8u);
    for (const auto& h : b) {
        const std::int64_t group = h.proj == Role::attn_q ? h.head / 2 : h.head;
        const std::int64_t offset = h.proj == Role::attn_q ? (h.head % 2) : (h.proj == Role::attn_k ? 2 : 3);
        EXPECT_EQ(h.block.row0, group * 64 + offset * 16);
    }
    const auto mq = schema_from_config(
        {{"model_type", "falcon"}, {"hidden_size", 64}, {"num_attention_heads", 4}, {"multi_query", true}});
    EXPECT_EQ(mq.heads->n_kv_heads, 1);
    EXPECT_EQ(mq.qkv_layout, QkvLayout::concatenated);
}

TEST(Schema, ReadsHeadGeometryFromConfig) {
    const auto s = schema_from_config({{"architectures", {"Olmo2ForCausalLM"}},
                                       {"model_type", "olmo2"},
                                       {"hidden_size", 64},
                                       {"num_attention_heads", 8},
                                       {"num_key_value_heads", 2}});
    EXPECT_EQ(s.family, "standard");
    EXPECT_TRUE(s.geometry_verified);
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
