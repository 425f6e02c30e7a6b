#include "diffract/run/unit_row.hpp"

namespace diffract::run {

UnitRow unit_row(const std::string& model, const analysis::MatrixUnit& unit) {
    UnitRow row;
    row.model = model;
    row.tensor = unit.tensor->name;
    row.layer = unit.layer;
    row.role = unit.role;
    row.head = unit.head;
    row.expert = unit.expert;
    row.expert_kind = unit.expert_kind;
    row.component = unit.component;
    row.rows = unit.block.logical_rows();
    row.cols = unit.block.logical_cols();
    return row;
}

}  // namespace diffract::run
