#include "table_columns.hpp"

#include <type_traits>
#include <vector>

#include <nanobind/stl/string.h>

namespace diffract::python {

namespace nb = nanobind;

nb::dict columns_of(const Table& table) {
    std::vector<nb::list> columns(table.columns.size());
    for (const auto& row : table.rows)
        for (std::size_t c = 0; c < columns.size(); ++c)
            columns[c].append(std::visit(
                [](const auto& v) -> nb::object {
                    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>)
                        return nb::none();
                    else
                        return nb::cast(v);
                },
                row.at(c)));
    nb::dict d;
    for (std::size_t c = 0; c < columns.size(); ++c) d[table.columns[c].c_str()] = columns[c];
    return d;
}

}  // namespace diffract::python
