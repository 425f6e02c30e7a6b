#include "diffract/report/csv.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/numbers.hpp"

namespace diffract::report {
namespace {

[[noreturn]] void fail(const std::string& source, std::size_t line, const std::string& what) {
    throw InputError(fmt::format("{}:{}: {}", source, line, what));
}

}  // namespace

int CsvTable::column(std::string_view name) const {
    const auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
}

int CsvTable::required(std::string_view name) const {
    const int c = column(name);
    if (c < 0) fail(source, 1, fmt::format("missing column '{}'", name));
    return c;
}

void CsvTable::fail_cell(std::size_t row, int col, const std::string& what) const {
    fail(source, lines[row], fmt::format("column '{}': {}", header[static_cast<std::size_t>(col)], what));
}

double CsvTable::number(std::size_t row, int col) const {
    const std::string& s = cell(row, col);
    if (s.empty() || s == "nan" || s == "NaN" || s == "-nan") return kNaN;
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size())
        fail(source, lines[row],
             fmt::format("column '{}': expected a number, found '{}'", header[static_cast<std::size_t>(col)],
                         s));
    return v;
}

std::optional<int> CsvTable::integer(std::size_t row, int col) const {
    const std::string& s = cell(row, col);
    if (s.empty()) return std::nullopt;
    int v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size())
        fail(source, lines[row],
             fmt::format("column '{}': expected an integer, found '{}'",
                         header[static_cast<std::size_t>(col)], s));
    return v;
}

std::optional<std::int64_t> CsvTable::int64(std::size_t row, int col) const {
    const std::string& s = cell(row, col);
    if (s.empty()) return std::nullopt;
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size())
        fail(source, lines[row],
             fmt::format("column '{}': expected an integer, found '{}'",
                         header[static_cast<std::size_t>(col)], s));
    return v;
}

CsvTable parse_csv(std::string_view text, const std::string& source) {
    CsvTable t;
    t.source = source;
    std::vector<std::string> fields;
    std::string field;
    bool quoted = false, any = false;
    std::size_t line = 1, row_line = 1;
    const auto end_row = [&] {
        fields.push_back(std::move(field));
        field.clear();
        const bool blank = fields.size() == 1 && fields[0].empty() && !any;
        if (!blank) {
            if (t.header.empty()) {
                t.header = std::move(fields);
            } else {
                if (fields.size() != t.header.size())
                    fail(source, row_line,
                         fmt::format("expected {} columns (as the header), found {}", t.header.size(),
                                     fields.size()));
                t.rows.push_back(std::move(fields));
                t.lines.push_back(row_line);
            }
        }
        fields.clear();
        any = false;
    };
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quoted) {
            if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
                field += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                if (c == '\n') ++line;
                field += c;
            }
            continue;
        }
        if (c == '"') {
            quoted = any = true;
        } else if (c == ',') {
            fields.push_back(std::move(field));
            field.clear();
            any = true;
        } else if (c == '\n') {
            end_row();
            row_line = ++line;
        } else if (c != '\r') {
            field += c;
            any = true;
        }
    }
    if (quoted) fail(source, row_line, "unterminated quoted field");
    if (any || !field.empty()) end_row();
    if (t.header.empty()) fail(source, 1, "empty file (expected a header line)");
    return t;
}

CsvTable read_csv(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(fmt::format("{}: cannot open file", path));
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_csv(ss.str(), path);
}

}  // namespace diffract::report
