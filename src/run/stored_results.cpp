#include "diffract/run/stored_results.hpp"

namespace diffract::run {

void for_each_stored_result(const std::string& path, const std::function<void(const StoredResult&)>& visit) {
    store::Store st(path, store::StoreMode::read_only);
    st.for_each_result(visit);
}

}  // namespace diffract::run
