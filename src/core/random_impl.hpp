// Deterministic random numbers whose values do not depend on the standard library's distributions
// (std::normal_distribution is implementation-defined): splitmix64 + Box-Muller.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace diffract {

inline std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// FNV-1a of a string, mixed with a seed: one independent stream per (seed, purpose, tensor).
inline std::uint64_t stream_seed(std::uint64_t seed, std::string_view a, std::string_view b = {}) {
    std::uint64_t h = 0xCBF29CE484222325ULL ^ seed;
    for (char c : a) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
    h = (h ^ 0xFF) * 0x100000001B3ULL;
    for (char c : b) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
    return h;
}

class Rng {
public:
    explicit Rng(std::uint64_t seed) : state_(seed) {}
    double uniform() { return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53; }  // [0, 1)
    double normal() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        const double u1 = 1.0 - uniform();  // (0, 1]
        const double u2 = uniform();
        const double r = std::sqrt(-2.0 * std::log(u1));
        spare_ = r * std::sin(2.0 * M_PI * u2);
        has_spare_ = true;
        return r * std::cos(2.0 * M_PI * u2);
    }
    std::uint64_t below(std::uint64_t n) { return splitmix64(state_) % n; }

private:
    std::uint64_t state_;
    double spare_ = 0;
    bool has_spare_ = false;
};

}  // namespace diffract
