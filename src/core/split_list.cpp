#include "diffract/core/split_list.hpp"

namespace diffract {

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= s.size()) {
        const auto c = s.find(',', start);
        auto part = s.substr(start, c == std::string::npos ? std::string::npos : c - start);
        if (!part.empty()) out.push_back(part);
        if (c == std::string::npos) break;
        start = c + 1;
    }
    return out;
}

}  // namespace diffract
