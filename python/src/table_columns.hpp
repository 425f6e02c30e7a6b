// A result table (diffract/core/table.hpp) as Python receives it: a dict of columns.
#pragma once

#include <nanobind/nanobind.h>

#include "diffract/core/table.hpp"

namespace diffract::python {

// {column name: list of values}, in the table's column order: an empty cell is None, a name str, a
// number float, a count int.
nanobind::dict columns_of(const Table& table);

}  // namespace diffract::python
