// What the store holds, for the readers above the run layer (the report): every stored result as a row,
// from a store opened read-only. Only the run layer and the front ends open the store themselves.
#pragma once

#include <functional>
#include <string>

#include "diffract/store/store.hpp"

namespace diffract::run {

using StoredResult = store::ResultRow;

// Visits every result of the store at `path`, opened read-only (StoreMode::read_only). Throws
// InputError naming the path when it is not a diffract store of this schema.
void for_each_stored_result(const std::string& path, const std::function<void(const StoredResult&)>& visit);

}  // namespace diffract::run
