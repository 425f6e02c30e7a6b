#include "diffract/core/table.hpp"

#include <stdexcept>
#include <type_traits>

#include "diffract/core/csv_field.hpp"

namespace diffract {
namespace {

std::string cell_text(const Cell& cell) {
    return std::visit(
        [](const auto& v) -> std::string {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::monostate>)
                return "";
            else if constexpr (std::is_same_v<T, std::string>)
                return csv_field(v);
            else if constexpr (std::is_same_v<T, double>)
                return format_value(v);
            else
                return std::to_string(v);
        },
        cell);
}

void append_line(std::string& out, const std::vector<std::string>& fields) {
    for (std::size_t i = 0; i < fields.size(); ++i) {
        if (i) out += ',';
        out += fields[i];
    }
    out += '\n';
}

}  // namespace

std::string to_csv(const Table& table) {
    std::vector<std::string> fields;
    for (const auto& c : table.columns) fields.push_back(csv_field(c));
    std::string out;
    append_line(out, fields);
    for (const auto& row : table.rows) {
        if (row.size() != table.columns.size())
            throw std::logic_error("to_csv: a row of " + std::to_string(row.size()) +
                                   " cells in a table of " + std::to_string(table.columns.size()) +
                                   " columns");
        fields.clear();
        for (const auto& cell : row) fields.push_back(cell_text(cell));
        append_line(out, fields);
    }
    return out;
}

}  // namespace diffract
