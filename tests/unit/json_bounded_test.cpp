// JSON read and quoted with bounded depth and cost (core/json_bounded.hpp): a value nested 150,000 deep
// is refused before nlohmann builds it (copying, comparing or dumping it would recurse once per level),
// and a quote of any value costs a few dozen characters whatever its size or depth.
#include <gtest/gtest.h>

#include <string>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"

namespace diffract {
namespace {

std::string nested(std::size_t depth, char open = '[', char close = ']') {
    return std::string(depth, open) + std::string(depth, close);
}

TEST(JsonBounded, DepthCountsBracketsOutsideStrings) {
    EXPECT_EQ(json_depth("1"), 0u);
    EXPECT_EQ(json_depth("[]"), 1u);
    EXPECT_EQ(json_depth(R"({"a": [1, {"b": [[]]}]})"), 5u);
    EXPECT_EQ(json_depth(R"({"a": "[[[[{{{{"})"), 1u);          // brackets inside a string
    EXPECT_EQ(json_depth(R"({"a": "\"[[[[", "b": [1]})"), 2u);  // an escaped quote does not end it
    EXPECT_EQ(json_depth(R"(["\\", [[1]]])"), 3u);              // an escaped backslash does
    // The count stops once past the limit: a gigabyte of '[' costs no more than the limit's worth.
    EXPECT_EQ(json_depth(nested(1'000'000), 10), 11u);
}

TEST(JsonBounded, DeepTextIsRefusedInOneLineNamingTheSource) {
    for (const auto& text :
         {nested(150'000), nested(kMaxJsonDepth + 1, '{', '}'), "{\"chunks\": " + nested(100'000) + "}"}) {
        try {
            (void)parse_json_bounded<nlohmann::ordered_json>(text, "adapter_config.json");
            FAIL() << "accepted " << text.size() << " characters";
        } catch (const InputError& e) {
            EXPECT_EQ(std::string(e.what()), "adapter_config.json: JSON nested deeper than " +
                                                 std::to_string(kMaxJsonDepth) + " levels");
        }
    }
    // At the limit: parsed, and as nlohmann parses it.
    const auto j = parse_json_bounded(nested(kMaxJsonDepth), "x");
    EXPECT_TRUE(j.is_array());
    EXPECT_TRUE(parse_json_bounded("{\"a\": ", "x").is_discarded());  // not JSON: discarded, as before
    EXPECT_THROW((void)parse_json_bounded("{\"a\": ", "x", true), nlohmann::json::exception);
}

TEST(JsonBounded, PreviewIsShortWhateverTheValue) {
    EXPECT_EQ(json_preview(nlohmann::json(3)), "3");
    EXPECT_EQ(json_preview(nlohmann::json("abc")), "\"abc\"");
    EXPECT_EQ(json_preview(nlohmann::json::parse(R"({"a":[1,2],"b":null})")), R"({"a":[1,2],"b":null})");
    EXPECT_EQ(json_preview(nlohmann::json(std::string(1'000'000, 'x'))), "\"" + std::string(39, 'x') + "...");
    // Deep values (built here one level at a time, as no parse of ours would) are shown to a few levels.
    nlohmann::json deep = nlohmann::json::array();
    for (int i = 0; i < 200; ++i) deep = nlohmann::json::array({std::move(deep)});
    EXPECT_EQ(json_preview(deep), "[[[[[...]]]]]");
    // Wide values: only the elements that fit are visited.
    nlohmann::ordered_json wide = nlohmann::ordered_json::array();
    for (int i = 0; i < 100'000; ++i) wide.push_back(i);
    const auto p = json_preview(wide, 20);
    EXPECT_EQ(p, "[0,1,2,3,4,5,6,7,8,9...");
    // A cut never splits a UTF-8 character.
    EXPECT_EQ(json_preview(nlohmann::json("\xc3\xa9\xc3\xa9\xc3\xa9"), 4), "\"\xc3\xa9...");
    // Invalid UTF-8 is replaced, never a failed dump.
    EXPECT_EQ(json_preview(nlohmann::json("a\xff")), "\"a\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace diffract
