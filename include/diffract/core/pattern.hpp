// Regular expressions that run in time linear in the subject and with bounded stack, whatever the
// pattern or the subject: every pattern the program evaluates comes from outside (--match/--exclude,
// an adapter's target_modules, model names, evaluator output). std::regex backtracks (a pattern like
// "(.*.*)*(x|y)" never ends) and recurses once per character (a 50,000-character tensor name overflows
// the stack); RE2 does neither. The syntax is RE2's, which is Python's `re` without backreferences
// and lookaround (PEFT's own patterns are Python regular expressions).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace diffract {

class Pattern {
public:
    // Compiles `pattern`; throws InputError "<what>: invalid regular expression '<pattern>' (<why>)".
    // `case_insensitive`: as Python's re.IGNORECASE.
    Pattern(std::string_view pattern, std::string_view what, bool case_insensitive = false);

    // Whether the pattern matches somewhere in `subject` (Python's re.search).
    bool search(std::string_view subject) const;
    // Whether it matches the whole of `subject` (Python's re.fullmatch).
    bool full_match(std::string_view subject) const;
    // The first match in `subject`: its capture groups ("" for a group that did not take part), or
    // nothing when there is no match.
    bool search(std::string_view subject, std::vector<std::string>& groups) const;

    const std::string& text() const { return text_; }

private:
    std::string text_;
    std::shared_ptr<const re2::RE2> re_;
};

}  // namespace diffract
