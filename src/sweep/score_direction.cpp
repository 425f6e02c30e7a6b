#include "diffract/sweep/score_direction.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract::sweep {
namespace {

constexpr std::array<std::string_view, 9> kLower{"perplexity", "ppl", "loss", "nll", "bpb",
                                                 "error",      "err", "wer",  "cer"};
constexpr std::array<std::string_view, 9> kHigher{"accuracy", "acc", "score", "auc",       "f1",
                                                  "bleu",     "em",  "rouge", "similarity"};

bool is_one_of(std::string_view w, const auto& words) {
    return std::find(words.begin(), words.end(), w) != words.end();
}

}  // namespace

std::optional<bool> key_lower_is_better(std::string_view score_key) {
    const auto dot = score_key.rfind('.');
    const std::string_view last = dot == std::string_view::npos ? score_key : score_key.substr(dot + 1);
    std::vector<std::string> words(1);
    for (const char ch : last) {
        const auto c = static_cast<unsigned char>(ch);
        if (std::isalnum(c))
            words.back().push_back(static_cast<char>(std::tolower(c)));
        else if (!words.back().empty())
            words.emplace_back();
    }
    bool lower = false, higher = false, negated = false;
    for (std::size_t i = 0; i < words.size(); ++i) {
        const auto& w = words[i];
        if (w == "neg" || w == "negative") negated = true;
        if (is_one_of(w, kLower)) lower = true;
        if (is_one_of(w, kHigher) || w.starts_with("rouge")) higher = true;
        if (w == "exact" && i + 1 < words.size() && words[i + 1] == "match") higher = true;
    }
    if (lower == higher) return std::nullopt;  // neither, or words of both kinds
    return lower != negated;
}

std::optional<bool> score_lower_is_better(const std::string& direction, const std::string& score_key) {
    if (const auto lower = value_of(kDirectionNames, direction)) return *lower;
    if (!direction.empty())
        throw InputError(
            fmt::format("--direction: expected {}, found '{}'", choice_list(kDirectionNames), direction));
    return key_lower_is_better(score_key);
}

bool required_lower_is_better(const std::string& direction, const std::string& score_key,
                              std::string_view why) {
    if (const auto lower = score_lower_is_better(direction, score_key)) return *lower;
    throw InputError(
        score_key.empty()
            ? fmt::format("--direction: {} needs the score's direction and no --score-key names a known "
                          "score (perplexity, loss, accuracy, ...); give --direction higher or lower",
                          why)
            : fmt::format("--direction: {} needs the score's direction and the score key '{}' does not say "
                          "it (known: perplexity, ppl, loss, nll, bpb, error: lower; accuracy, acc, score, "
                          "auc, f1, exact_match, bleu, rouge: higher); give --direction higher or lower",
                          why, score_key));
}

std::string direction_name(bool lower_is_better) {
    return std::string(name_of(kDirectionNames, lower_is_better));
}

}  // namespace diffract::sweep
