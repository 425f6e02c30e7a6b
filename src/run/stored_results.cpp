#include "diffract/run/stored_results.hpp"

#include <filesystem>

#include "diffract/formats/lora_adapter.hpp"

namespace diffract::run {

void for_each_stored_result(const std::string& path, const std::function<void(const StoredResult&)>& visit) {
    store::Store st(path, store::StoreMode::read_only);
    st.for_each_result(visit);
}

std::vector<std::string> recorded_inputs(store::Store& db) {
    auto out = db.input_paths();
    // An adapter model is recorded as BASE+ADAPTER (Checkpoint::source): both directories are inputs.
    for (std::size_t i = 0, n = out.size(); i < n; ++i)
        if (auto [base, adapter] = formats::split_lora_spec(out[i]); !adapter.empty())
            out.insert(out.end(), {base, adapter});
    return out;
}

std::vector<std::string> stored_input_paths(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return {};
    store::Store st(path, store::StoreMode::read_only);
    return recorded_inputs(st);
}

}  // namespace diffract::run
