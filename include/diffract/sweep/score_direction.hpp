// Which scores are better, by one rule for every command that judges better or worse (sweep validate,
// the rewind, truncate and interpolate summaries' picks, the report's labels): --direction when given,
// else the direction a known score key implies, else none (validate, and a sweep that picks a best x,
// then refuse to guess).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "diffract/core/names.hpp"

namespace diffract::sweep {

// --direction's and summary.json's words, by whether lower is better.
inline constexpr NameTable<bool, 2> kDirectionNames{{{false, "higher"}, {true, "lower"}}};

// The direction a score key implies, from the words of its last dotted component (case ignored;
// words split at '_', '-' and other non-alphanumerics): perplexity, ppl, loss, nll, bpb, error (and
// err, wer, cer) say lower is better; accuracy, acc, score, auc, f1, exact_match, bleu, rouge (rouge1,
// rougeL, ...) and similarity say higher; a "neg" word turns either round. nullopt for a key with none
// of them, or with words of both kinds.
std::optional<bool> key_lower_is_better(std::string_view score_key);

// The direction of a sweep's score: `direction` ("higher" or "lower") when given, else the key's.
// nullopt when neither says; throws InputError for another `direction`.
std::optional<bool> score_lower_is_better(const std::string& direction, const std::string& score_key);

// As score_lower_is_better, but the direction is required: throws InputError (naming --direction and
// the key) when neither the option nor the key gives it. `why` says what needs it.
bool required_lower_is_better(const std::string& direction, const std::string& score_key,
                              std::string_view why);

// "lower" or "higher": the summary's "direction".
std::string direction_name(bool lower_is_better);

}  // namespace diffract::sweep
