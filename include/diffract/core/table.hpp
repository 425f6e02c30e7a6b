// A result table: named columns and rows of typed cells. The one value every result table (metrics.csv,
// heads.csv, ...) is built as, so that the CSV writer and the Python bindings read the same columns
// instead of each spelling them out (run/tables.hpp builds them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace diffract {

// An empty cell (monostate: a whole matrix has no head), a name, a number or a count.
using Cell = std::variant<std::monostate, std::string, double, std::int64_t, std::uint64_t>;

struct Table {
    std::vector<std::string> columns;
    std::vector<std::vector<Cell>> rows;  // each as long as `columns`
};

// A column of a table of `Row`s: its name next to how a row fills it, so that a table's names and
// values cannot drift apart.
template <typename Row>
struct Column {
    std::string name;
    std::function<Cell(const Row&)> value;
};

// A row per element of `rows`, a cell per column.
template <typename Row>
Table make_table(const std::vector<Column<Row>>& columns, const std::vector<Row>& rows) {
    Table t;
    for (const auto& c : columns) t.columns.push_back(c.name);
    for (const auto& r : rows) {
        auto& cells = t.rows.emplace_back();
        for (const auto& c : columns) cells.push_back(c.value(r));
    }
    return t;
}

// The table as every CSV of the tool is written: a header line, then a line per row; names through
// csv_field, numbers through format_value, counts in decimal, empty cells empty. Throws
// std::logic_error for a row whose length is not the number of columns.
std::string to_csv(const Table& table);

}  // namespace diffract
