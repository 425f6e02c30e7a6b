// One CSV field as RFC 4180 writes it: quoted (with quotes doubled) only when it holds a comma, a
// quote or a newline. Every CSV the tool writes passes names through this, so a model named
// "a,b" cannot shift the columns.
#pragma once

#include <string>
#include <string_view>

namespace diffract {

std::string csv_field(std::string_view s);

}  // namespace diffract
