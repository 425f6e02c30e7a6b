// Issue 13 §4: every bad input is an InputError with one line naming the file (and tensor): the
// geometry rule of config.json and GGUF metadata, the --heads CSV, grid sizes, free space.
#include <gtest/gtest.h>

#include <string>

#include "diffract/core/error.hpp"
#include "diffract/core/json_text.hpp"
#include "diffract/edit/edit.hpp"
#include "diffract/formats/checkpoint.hpp"
#include "diffract/formats/gguf.hpp"
#include "diffract/model/schema.hpp"

using namespace diffract;
using nlohmann::json;

namespace {

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const InputError& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        return what;
    }
    ADD_FAILURE() << "no InputError";
    return "";
}

json llama(const char* key, json value) {
    json c = {{"model_type", "llama"}, {"hidden_size", 64}, {"num_attention_heads", 8}};
    c[key] = std::move(value);
    return c;
}

}  // namespace

TEST(GeometryRule, EveryKeyIsAPositiveIntegerOrAbsent) {
    for (const char* key : {"num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "n_head_kv",
                            "num_kv_heads", "hidden_size", "n_embd", "d_model", "head_dim",
                            "num_hidden_layers", "n_layer", "intermediate_size"}) {
        for (const json& bad : {json(0), json(-8), json(7.5), json("8"), json(true), json(1e12),
                                json(std::uint64_t{1} << 40), json::array({8}), json::object()}) {
            const auto what = error_of([&] { model::schema_from_config(llama(key, bad), "m/config.json"); });
            EXPECT_NE(what.find("m/config.json: key '" + std::string(key) + "'"), std::string::npos) << what;
            EXPECT_NE(what.find("positive integer"), std::string::npos) << what;
        }
        EXPECT_NO_THROW(model::schema_from_config(llama(key, nullptr), "m/config.json")) << key;
    }
    // 8.0 is not an integer either: one rule, no coercion.
    EXPECT_THROW(model::schema_from_config(llama("num_attention_heads", 8.0)), InputError);
}

TEST(GeometryRule, AliasesAgreeAndCountsDivide) {
    auto c = llama("n_head", 4);
    EXPECT_NE(error_of([&] { model::schema_from_config(c, "cfg"); }).find("contradicts"), std::string::npos);
    EXPECT_THROW(model::schema_from_config(llama("num_key_value_heads", 3)), InputError);
    EXPECT_THROW(model::schema_from_config(llama("num_key_value_heads", 16)), InputError);
    EXPECT_NE(error_of([&] {
                  model::schema_from_config(json::array({1, 2}), "x/config.json");
              }).find("x/config.json: config is not a JSON object"),
              std::string::npos);
    EXPECT_THROW(model::schema_from_config(llama("model_type", 5)), InputError);
    const auto ok = model::schema_from_config(llama("num_key_value_heads", 2));
    ASSERT_TRUE(ok.heads);
    EXPECT_EQ(ok.heads->n_kv_heads, 2);
}

TEST(GeometryRule, HiddenSizeMustMatchTheProjections) {
    const auto s = model::schema_from_config(llama("head_dim", 8));
    TensorInfo q;
    q.name = "model.layers.0.self_attn.q_proj.weight";
    q.shape = {64, 48};  // 8 heads x 8 rows, but 48 input columns where hidden_size says 64
    const auto what = error_of([&] { model::head_blocks(s, q, model::Role::attn_q); });
    EXPECT_NE(what.find("hidden_size (expected 64, found 48)"), std::string::npos) << what;
    q.shape = {64, 64};
    EXPECT_EQ(model::head_blocks(s, q, model::Role::attn_q).size(), 8u);
}

TEST(GeometryRule, GgufMetadataFollowsTheSameRule) {
    formats::GgufFile g;
    g.architecture = "llama";
    g.metadata = {{"llama.attention.head_count", 8}, {"llama.embedding_length", 64}};
    auto cfg = formats::gguf_config(g, "m.gguf");
    EXPECT_EQ(cfg["num_attention_heads"], 8);
    EXPECT_EQ(cfg["hidden_size"], 64);
    for (const char* key : {"attention.head_count", "attention.head_count_kv", "embedding_length",
                            "attention.key_length", "block_count", "feed_forward_length"}) {
        for (const json& bad : {json(0), json(-1), json(2.5), json("x"), json(false), json(1e15)}) {
            auto h = g;
            h.metadata[std::string("llama.") + key] = bad;
            const auto what = error_of([&] { formats::gguf_config(h, "m.gguf"); });
            EXPECT_NE(what.find(std::string("m.gguf: metadata key 'llama.") + key + "'"), std::string::npos)
                << what;
        }
    }
    // Per-layer head counts: one value when every layer agrees, unknown (heads not split) otherwise.
    g.metadata["llama.attention.head_count_kv"] = {2, 2};
    EXPECT_EQ(formats::gguf_config(g, "m.gguf")["num_key_value_heads"], 2);
    g.metadata["llama.attention.head_count_kv"] = {2, 0};
    EXPECT_FALSE(formats::gguf_config(g, "m.gguf").contains("num_attention_heads"));
}

TEST(ConfigJson, MustBeAJsonObject) {
    auto parse = [](std::string text) {
        return formats::parse_config_json({reinterpret_cast<const std::byte*>(text.data()), text.size()},
                                          "d/config.json");
    };
    EXPECT_NE(error_of([&] { parse("[1]"); }).find("d/config.json: config is not a JSON object"),
              std::string::npos);
    EXPECT_NE(error_of([&] { parse("{\"a\":"); }).find("d/config.json: config is not valid JSON"),
              std::string::npos);
    EXPECT_NE(error_of([&] { parse("\"text\""); }).find("found string"), std::string::npos);
    EXPECT_TRUE(parse("{}").is_object());
}

TEST(HeadsCsv, AcceptsRowsHeaderCommentsAndRewoundHeadsCsv) {
    const auto h = edit::parse_heads_csv("# chosen\nlayer,head\r\n0,1\r\n\n 2 , 3 \n", "h.csv");
    ASSERT_EQ(h.size(), 2u);
    EXPECT_EQ(h[1].layer, 2);
    EXPECT_EQ(h[1].head, 3);
    EXPECT_EQ(h[1].line, 5);
    EXPECT_EQ(h[1].source, "h.csv");
    EXPECT_EQ(edit::parse_heads_csv("layer,head,kv_head,kv_rewound,rank\n1,0,0,1,0\n", "r.csv").size(), 1u);
}

TEST(HeadsCsv, RefusesEverythingElseNamingFileAndLine) {
    const std::pair<const char*, const char*> cases[] = {
        {"layer,head\n0,1.5\n", "h.csv: line 2: expected 'layer,head'"},
        {"0,1\n0,-1\n", "h.csv: line 2:"},
        {"0,1\n0,1e3\n", "h.csv: line 2:"},
        {"0,1\n0,1\n", "h.csv: line 2: head 1 of layer 0 is listed twice (first on line 1)"},
        {"0\n", "h.csv: line 1:"},
        {"heads,layers\n0,1\n", "h.csv: line 1: expected the header"},
        {"0,1\nlayer,head\n", "h.csv: line 2:"},
        {"0,99999999999\n", "h.csv: line 1:"},
        {"", "h.csv: lists no heads"},
        {"# only a comment\n", "h.csv: lists no heads"},
    };
    for (const auto& [text, expected] : cases)
        EXPECT_NE(error_of([&] { edit::parse_heads_csv(text, "h.csv"); }).find(expected), std::string::npos)
            << text;
    const std::string binary(
        "\x7f"
        "ELF\x02\x01\x00\x00,\n\x00\x01",
        12);
    const auto what = error_of([&] { edit::parse_heads_csv(binary, "h.csv"); });
    EXPECT_NE(what.find("h.csv: line 1:"), std::string::npos) << what;
    EXPECT_NE(what.find("\\x7f"), std::string::npos) << what;  // shown escaped, on one line
    EXPECT_NE(error_of([] { edit::read_heads_file("/dev/null"); }).find("not a regular file"),
              std::string::npos);
}

TEST(Grids, AreCountedBeforeTheyAreMade) {
    EXPECT_EQ(edit::parse_grid("0:1:0.1", "--grid").size(), 11u);
    for (const char* big : {"0:1:1e-9", "0:1:1e-300", "0:1e300:1e-300"}) {
        const auto what = error_of([&] { edit::parse_grid(big, "--grid"); });
        EXPECT_NE(what.find("--grid '"), std::string::npos) << what;
        EXPECT_NE(what.find("--max-candidates"), std::string::npos) << what;
    }
    EXPECT_THROW(edit::parse_grid("0,0.5,1", "--omegas", 2), InputError);
    EXPECT_EQ(edit::parse_grid("0,0.5,1", "--omegas", 3).size(), 3u);
    EXPECT_EQ(edit::parse_grid("0:1:1e-4", "--keeps", 20000).size(), 10001u);
    EXPECT_THROW(edit::check_max_candidates(0), InputError);
}

TEST(Grids, FreeSpaceIsCheckedBeforeWriting) {
    EXPECT_NO_THROW(edit::check_free_space(testing::TempDir() + "/not/yet/there", 1, "one byte"));
    const auto what = error_of(
        [] { edit::check_free_space(testing::TempDir() + "/out", ~std::uint64_t{0} / 2, "11 checkpoints"); });
    EXPECT_NE(what.find("not enough free space for 11 checkpoints"), std::string::npos) << what;
}

TEST(JsonText, NeverFailsOnNonUtf8Strings) {
    const json j = {{"path", std::string("caf\xe9/model")}};
    EXPECT_THROW((void)j.dump(), json::exception);
    const auto text = json_text(j);
    EXPECT_EQ(json::parse(text)["path"], "caf\xef\xbf\xbd/model");
    EXPECT_EQ(json_round_trip(j), json::parse(text));
}
