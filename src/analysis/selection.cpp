#include "diffract/analysis/selection.hpp"

#include <charconv>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/split_list.hpp"

namespace diffract::analysis {
namespace {

int parse_layer(const std::string& s) {
    int v = -1;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < 0)
        throw InputError(fmt::format("--layers: '{}' is not a layer index", s));
    return v;
}

}  // namespace

bool Selection::selects(const std::string& name, const model::TensorRole& r) const {
    if (!layers.empty() && (!r.layer || !layers.count(*r.layer))) return false;
    if (!roles.empty() && !roles.count(r.role)) {
        // A fused qkv tensor is selected by any of its parts' roles.
        const bool fused_part = r.role == model::Role::attn_qkv &&
                                (roles.count(model::Role::attn_q) || roles.count(model::Role::attn_k) ||
                                 roles.count(model::Role::attn_v));
        if (!fused_part) return false;
    }
    if (match && !match->search(name)) return false;
    if (exclude && exclude->search(name)) return false;
    return true;
}

void throw_nothing_selected(std::string_view source, const Selection& selection, std::string_view nothing) {
    throw_input_error(
        source, "",
        fmt::format("{}: {}", nothing,
                    selection.selects_all()
                        ? "the checkpoint has none"
                        : "the selection (--roles, --layers, --match, --exclude) matches none"));
}

Selection make_selection(const SelectionText& text) {
    const auto& [roles, layers, match, exclude] = text;
    Selection s;
    for (const auto& r : split_list(roles)) {
        auto role = model::role_from_name(r);
        if (!role)
            throw InputError(
                fmt::format("--roles: unknown role '{}' (expected attn_q, attn_k, attn_v, attn_o, attn_qkv, "
                            "mlp_gate, mlp_up, mlp_down, mlp_gate_up, embed, lm_head, norm, other)",
                            r));
        s.roles.insert(*role);
    }
    for (const auto& part : split_list(layers)) {
        const auto dash = part.find('-');
        if (dash == std::string::npos) {
            s.layers.insert(parse_layer(part));
        } else {
            const int a = parse_layer(part.substr(0, dash)), b = parse_layer(part.substr(dash + 1));
            if (b < a) throw InputError(fmt::format("--layers: empty range '{}'", part));
            for (int l = a; l <= b; ++l) s.layers.insert(l);
        }
    }
    if (!match.empty()) s.match.emplace(match, "--match");
    if (!exclude.empty()) s.exclude.emplace(exclude, "--exclude");
    return s;
}

}  // namespace diffract::analysis
