// A small CSV reader for the tables diffract writes (RFC 4180 quoting: "a,b", "say ""hi""").
// Every error names the file and the line: "<path>:<line>: <what is wrong>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace diffract::report {

struct CsvTable {
    std::string source;  // the file, for messages
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;  // each as wide as the header
    std::vector<std::size_t> lines;              // the file line of each row

    int column(std::string_view name) const;  // -1 when absent
    // The column a reader needs: InputError "<path>:1: missing column 'NAME'" when absent.
    int required(std::string_view name) const;
    // Throws InputError "<path>:<line>: column 'NAME': WHAT" for a row's cell.
    [[noreturn]] void fail_cell(std::size_t row, int col, const std::string& what) const;
    bool has(std::string_view name) const { return column(name) >= 0; }
    // The cell of a column known to exist (column() >= 0).
    const std::string& cell(std::size_t row, int col) const {
        return rows[row][static_cast<std::size_t>(col)];
    }
    // A numeric cell: "" / "nan" → NaN; anything else unparsable → InputError naming file and line.
    double number(std::size_t row, int col) const;
    // An integer cell, or empty for "".
    std::optional<int> integer(std::size_t row, int col) const;
    // A 64-bit integer cell (a training step), or empty for "".
    std::optional<std::int64_t> int64(std::size_t row, int col) const;
};

// Parses `text` (from `source`). Throws InputError on an unterminated quote or a row whose width
// differs from the header's.
CsvTable parse_csv(std::string_view text, const std::string& source);
// Reads and parses a file; InputError if it cannot be read.
CsvTable read_csv(const std::string& path);

}  // namespace diffract::report
