// The two rules every CSV the tool writes follows.
//
// csv_field: one CSV field as RFC 4180 writes it: quoted (with quotes doubled) only when it holds a comma, a
// quote or a newline. Every CSV the tool writes passes names through this, so a model named
// "a,b" cannot shift the columns.
#pragma once

#include <string>
#include <string_view>

namespace diffract {

std::string csv_field(std::string_view s);

// A number as every CSV writes it: the shortest decimal that reads back to the same double, "nan" for NaN.
std::string format_value(double v);

}  // namespace diffract
