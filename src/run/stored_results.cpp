#include "diffract/run/stored_results.hpp"

#include <filesystem>

namespace diffract::run {

void for_each_stored_result(const std::string& path, const std::function<void(const StoredResult&)>& visit) {
    store::Store st(path, store::StoreMode::read_only);
    st.for_each_result(visit);
}

std::vector<std::string> stored_input_paths(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return {};
    store::Store st(path, store::StoreMode::read_only);
    return st.input_paths();
}

}  // namespace diffract::run
