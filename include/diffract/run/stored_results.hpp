// What the store holds, for the readers above the run layer (the report): every stored result as a row,
// from a store opened read-only. Only the run layer and the front ends open the store themselves.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "diffract/store/store.hpp"

namespace diffract::run {

using StoredResult = store::ResultRow;

// Visits every result of the store at `path`, opened read-only (StoreMode::read_only). Throws
// InputError naming the path when it is not a diffract store of this schema.
void for_each_stored_result(const std::string& path, const std::function<void(const StoredResult&)>& visit);

// Every path `db` has recorded as an input (store::Store::input_paths), an adapter model's
// BASE+ADAPTER as both directories.
std::vector<std::string> recorded_inputs(store::Store& db);
// recorded_inputs of the store at `path`; empty when there is no store there.
std::vector<std::string> stored_input_paths(const std::string& path);

}  // namespace diffract::run
