// The one comma-list splitter of the option and config grammars (--roles, --layers, --metrics, report lists).
#pragma once

#include <string>
#include <vector>

namespace diffract {

// "a,b,,c" → {"a", "b", "c"}: items split at every comma, empty items dropped, nothing trimmed.
std::vector<std::string> split_list(const std::string& s);

}  // namespace diffract
