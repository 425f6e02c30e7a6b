#include "diffract/core/pattern.hpp"

#include <re2/re2.h>

#include <fmt/format.h>

#include "diffract/core/error.hpp"

namespace diffract {

Pattern::Pattern(std::string_view pattern, std::string_view what, bool case_insensitive) : text_(pattern) {
    RE2::Options options;
    options.set_log_errors(false);
    options.set_case_sensitive(!case_insensitive);
    // RE2's memory bound for its compiled automata: a pattern over it is refused as too large.
    options.set_max_mem(std::int64_t{64} << 20);
    auto re = std::make_shared<const RE2>(re2::StringPiece(pattern.data(), pattern.size()), options);
    if (!re->ok())
        throw InputError(
            fmt::format("{}: invalid regular expression '{}' ({})", what, one_line(pattern), re->error()));
    re_ = std::move(re);
}

bool Pattern::search(std::string_view subject) const {
    return RE2::PartialMatch(re2::StringPiece(subject.data(), subject.size()), *re_);
}

bool Pattern::full_match(std::string_view subject) const {
    return RE2::FullMatch(re2::StringPiece(subject.data(), subject.size()), *re_);
}

bool Pattern::search(std::string_view subject, std::vector<std::string>& groups) const {
    const int n = re_->NumberOfCapturingGroups();
    std::vector<re2::StringPiece> found(static_cast<std::size_t>(n) + 1);
    if (!re_->Match(re2::StringPiece(subject.data(), subject.size()), 0, subject.size(), RE2::UNANCHORED,
                    found.data(), n + 1))
        return false;
    groups.clear();
    for (int i = 1; i <= n; ++i)
        groups.emplace_back(found[static_cast<std::size_t>(i)].data()
                                ? std::string(found[static_cast<std::size_t>(i)])
                                : std::string());
    return true;
}

}  // namespace diffract
