// One name table per category, read in both directions (llama.cpp's LLM_ARCH_NAMES with
// llm_arch_name / llm_arch_from_string): a category is an enum class, and its text lives in one table
// that parsing and output both read. Adding a value is one table row; no switch or if-chain spells it
// a second time.
//
//     inline constexpr NameTable<HeadOrder, 4> kHeadOrderNames{{{HeadOrder::importance, "importance"}, ...}};
//     name_of(kHeadOrderNames, HeadOrder::random)     // "random"
//     value_of(kHeadOrderNames, "random")             // HeadOrder::random (nullopt for unknown text)
//     choice_list(kHeadOrderNames)                    // "importance, agreement, pl_ks or random"
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace diffract {

template <class E>
struct Named {
    E value;
    std::string_view name;
};

template <class E, std::size_t N>
using NameTable = std::array<Named<E>, N>;

// The text of a value; "" for a value outside the table.
template <class E, std::size_t N>
constexpr std::string_view name_of(const NameTable<E, N>& table, E value) {
    for (const auto& row : table)
        if (row.value == value) return row.name;
    return {};
}

// The value a text names; nullopt for text outside the table.
template <class E, std::size_t N>
constexpr std::optional<E> value_of(const NameTable<E, N>& table, std::string_view text) {
    for (const auto& row : table)
        if (row.name == text) return row.value;
    return std::nullopt;
}

// The names as an error message lists them: "a", "a or b", "a, b or c".
template <class E, std::size_t N>
std::string choice_list(const NameTable<E, N>& table) {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
        if (i > 0) out += i + 1 == N ? " or " : ", ";
        out += table[i].name;
    }
    return out;
}

}  // namespace diffract
