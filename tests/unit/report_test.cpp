// The report's building blocks: SVG well-formedness, CSV parsing and its errors, step parsing from
// checkpoint names, colour mapping, tick labels that fit their axis.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "diffract/core/error.hpp"
#include "diffract/report/csv.hpp"
#include "diffract/report/palette.hpp"
#include "diffract/report/plot.hpp"
#include "diffract/report/series.hpp"
#include "diffract/report/svg.hpp"

namespace diffract::report {
namespace {

std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (auto pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
    return n;
}

TEST(ReportSvg, EscapesAndBalancesElements) {
    Svg svg(200, 100, "figure", "a <b> & \"c\"");
    svg.rect(0, 0, 10, 10, "red", "layer 1, head <2>");
    svg.text(5, 5, "x < y & z");
    svg.begin_group({{"class", "g"}});
    svg.circle(1, 2, 3, "blue");
    svg.end_group();
    const auto s = svg.str();
    EXPECT_EQ(s.rfind("<svg class=\"figure\"", 0), 0u);
    EXPECT_NE(s.find("<title>layer 1, head &lt;2&gt;</title>"), std::string::npos);
    EXPECT_NE(s.find("x &lt; y &amp; z"), std::string::npos);
    EXPECT_EQ(s.find("<b>"), std::string::npos);
    EXPECT_EQ(count(s, "<g"), count(s, "</g>"));
    EXPECT_EQ(count(s, "<svg"), count(s, "</svg>"));
    EXPECT_EQ(count(s, "<title>"), count(s, "</title>"));
}

TEST(ReportSvg, NumbersAreCompact) {
    EXPECT_EQ(svg_num(1.0), "1");
    EXPECT_EQ(svg_num(1.239), "1.24");
    EXPECT_EQ(svg_num(-0.001), "0");
    EXPECT_EQ(svg_num(NAN), "0");
}

TEST(ReportPlot, TicksAndScales) {
    const auto t = nice_ticks(0, 1, 5);
    ASSERT_FALSE(t.empty());
    EXPECT_DOUBLE_EQ(t.front(), 0);
    EXPECT_DOUBLE_EQ(t.back(), 1);
    EXPECT_EQ(log_ticks(1e-3, 10).size(), 5u);
    Scale lin{0, 10, 100, 200};
    EXPECT_DOUBLE_EQ(lin(5), 150);
    Scale lg{1, 100, 0, 2, true};
    EXPECT_DOUBLE_EQ(lg(10), 1);
    EXPECT_EQ(tick_label(0.25, 0.05), "0.25");
    EXPECT_EQ(tick_label(3, 1), "3");
}

TEST(ReportPlot, LabelsFitTheirRoom) {
    EXPECT_EQ(log_tick_label(0.01), "0.01");
    EXPECT_EQ(log_tick_label(1000), "1000");
    EXPECT_EQ(log_tick_label(1e-5), "10⁻⁵");
    EXPECT_EQ(log_tick_label(1e12), "10¹²");
    EXPECT_DOUBLE_EQ(text_width("λ = σ²", 10), 6 * 10 * 0.6);  // code points, not bytes
    EXPECT_EQ(fit_text("pl_alpha (power-law exponent α)", 100, 10), "pl_alpha");
    const auto cut = fit_text("continual-pretraining-math-20B", 60, 10);
    EXPECT_LE(text_width(cut, 10), 60);
    EXPECT_TRUE(cut.starts_with("conti") && cut.ends_with("20B")) << cut;
    // Exponents that are multiples of the stride, whatever the lowest power.
    EXPECT_EQ(log_ticks(1e-7, 1.5, 3), (std::vector<double>{1e-6, 1e-3, 1}));
}

// The tick labels of an axis, as drawn: (x, y, text) of every 10 px label.
std::vector<std::tuple<double, double, std::string>> tick_texts(const std::string& svg) {
    std::vector<std::tuple<double, double, std::string>> out;
    const std::regex re(R"re(<text x="([-\d.]+)" y="([-\d.]+)" font-size="10"[^>]*>([^<]*)</text>)re");
    for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it)
        out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]), (*it)[3]);
    return out;
}

TEST(ReportPlot, CrowdedAxesAreThinnedUntilLabelsFit) {
    // Twelve decades on a 200 px log axis; 40 layers on a 150 px categorical axis.
    Svg svg(400, 400);
    Axis x{"λ", {}, true, {}, false}, y{"layer", {}, false, {}, false};
    x.range.add(1e-10);
    x.range.add(50);
    for (int l = 0; l < 40; ++l) y.categories.push_back(std::to_string(l));
    draw_axes(svg, {60, 20, 200, 150}, "t", x, y);
    std::vector<std::pair<double, std::string>> xs, ys;
    for (const auto& [px, py, s] : tick_texts(svg.str())) (py > 180 ? xs : ys).emplace_back(px, s);
    ASSERT_GE(xs.size(), 3u);
    ASSERT_GE(ys.size(), 4u);
    EXPECT_LT(ys.size(), 40u);
    for (std::size_t i = 1; i < xs.size(); ++i)  // centred labels: half of each width apart, and a gap
        EXPECT_GE(xs[i].first - xs[i - 1].first,
                  (text_width(xs[i].second, 10) + text_width(xs[i - 1].second, 10)) / 2 + 4)
            << xs[i - 1].second << " " << xs[i].second;
}

TEST(ReportSeries, StepsFromNames) {
    EXPECT_EQ(parse_step("step1000")->value, 1000);
    EXPECT_EQ(parse_step("step1000")->unit, "step");
    EXPECT_EQ(parse_step("stage1-step2000-tokens4B")->value, 2000);
    EXPECT_EQ(parse_step("checkpoint-500")->value, 500);
    const auto tok = parse_step("olmo-tokens4B");
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->unit, "tokens");
    EXPECT_DOUBLE_EQ(tok->value, 4e9);
    EXPECT_DOUBLE_EQ(parse_step("pretrain-4T")->value, 4e12);
    EXPECT_FALSE(parse_step("math"));
    EXPECT_FALSE(parse_step("stage1"));
}

TEST(ReportSeries, StepsKeepTheirDigitsBeyondADouble) {
    // 2^53 + 1 and 2^53 are one double; their exact steps differ. Past 64 bits there is no exact step.
    EXPECT_EQ(parse_step("checkpoint-9007199254740993")->exact, 9007199254740993);
    EXPECT_EQ(parse_step("checkpoint-9007199254740992")->exact, 9007199254740992);
    EXPECT_EQ(parse_step("step9223372036854775807")->exact, INT64_MAX);
    EXPECT_FALSE(parse_step("step9223372036854775808")->exact);
    EXPECT_FALSE(parse_step("olmo-tokens4B")->exact);
}

TEST(ReportSeries, OrdersByStepOrKeepsInputOrder) {
    const auto s = order_series({"run-step300", "run-step20", "run-step1000"});
    EXPECT_TRUE(s.from_names);
    EXPECT_EQ(s.models, (std::vector<std::string>{"run-step20", "run-step300", "run-step1000"}));
    EXPECT_EQ(s.x, (std::vector<double>{20, 300, 1000}));
    const auto kept = order_series({"b", "a-step5"});
    EXPECT_FALSE(kept.from_names);
    EXPECT_EQ(kept.models, (std::vector<std::string>{"b", "a-step5"}));
    EXPECT_EQ(kept.x, (std::vector<double>{0, 1}));
}

TEST(ReportPalette, StableAssignmentsAndOverrides) {
    ColourAssigner c(std::map<std::string, std::string>{{"text", "#123456"}});
    const auto math = c("math");
    EXPECT_EQ(c("text"), "#123456");
    EXPECT_EQ(c("code"), palette_colour(1));
    EXPECT_EQ(c("math"), math);
    EXPECT_THROW(check_colour("#12", "--colours"), InputError);
    EXPECT_NO_THROW(check_colour("teal", "--colours"));
    EXPECT_NO_THROW(check_colour("#a0b1c2", "--colours"));
}

TEST(ReportPalette, ColourMaps) {
    const auto seq = make_colour_map(ColourMapKind::sequential, 0, 1);
    EXPECT_EQ(seq.at(0), "#440154");
    EXPECT_EQ(seq.at(1), "#fde725");
    EXPECT_EQ(seq.at(NAN), "#dddddd");
    const auto div = make_colour_map(ColourMapKind::diverging, -0.2, 0.5);
    EXPECT_DOUBLE_EQ(div.lo, -0.5);
    EXPECT_DOUBLE_EQ(div.hi, 0.5);
    EXPECT_EQ(div.at(0), "#f7f7f7");
    EXPECT_EQ(div.at(-0.5), "#2166ac");
}

TEST(ReportCsv, QuotingAndErrors) {
    const auto t = parse_csv("model,tensor,x\n\"a,b\",\"say \"\"hi\"\"\",1.5\nc,d,nan\n", "t.csv");
    ASSERT_EQ(t.rows.size(), 2u);
    EXPECT_EQ(t.rows[0][0], "a,b");
    EXPECT_EQ(t.rows[0][1], "say \"hi\"");
    EXPECT_DOUBLE_EQ(t.number(0, t.column("x")), 1.5);
    EXPECT_TRUE(std::isnan(t.number(1, 2)));
    EXPECT_EQ(t.column("nope"), -1);
    try {
        parse_csv("a,b\n1,2\n3\n", "bad.csv");
        FAIL();
    } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()), "bad.csv:3: expected 2 columns (as the header), found 1");
    }
    const auto bad = parse_csv("a\nxyz\n", "n.csv");
    try {
        (void)bad.number(0, 0);
        FAIL();
    } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()), "n.csv:2: column 'a': expected a number, found 'xyz'");
    }
    EXPECT_THROW(parse_csv("a\n\"open\n", "q.csv"), InputError);
}

TEST(ReportPlot, IntegerAxesHaveNoFractionalTicks) {
    // One or two layers: a nice-number axis would put ticks at 0.5, 1.5; a layer axis has none.
    for (const double last : {0.0, 1.0, 2.0}) {
        Svg svg(400, 300);
        Axis x{"layer", {}, false, {}, false, true}, y{"v", {}, false, {}, false};
        x.range.add(0);
        x.range.add(last);
        y.range.add(0);
        y.range.add(1);
        draw_axes(svg, {60, 20, 300, 200}, "t", x, y);
        std::size_t below = 0;
        for (const auto& [px, py, s] : tick_texts(svg.str()))
            if (py > 225) {
                ++below;
                EXPECT_EQ(s.find('.'), std::string::npos) << "x tick '" << s << "' with layers 0.." << last;
            }
        EXPECT_GE(below, 1u);
    }
}

}  // namespace
}  // namespace diffract::report
