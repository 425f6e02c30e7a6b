#include "diffract/analysis/selection.hpp"

#include <charconv>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/split_list.hpp"

namespace diffract::analysis {
namespace {

// The widest --layers or --experts range: a typo such as 0-2000000000 is refused, not a set of billions.
constexpr int kMaxGeometryIndexRange = model::kMaxGeometryValue;

int parse_index(const std::string& s, std::string_view flag, std::string_view what) {
    int v = -1;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < 0)
        throw InputError(fmt::format("{}: '{}' is not {}", flag, s, what));
    return v;
}

// "0-3,7": indices and inclusive ranges into `out`; `word` (if any) is passed to `on_word` instead.
void parse_indices(const std::string& text, std::string_view flag, std::string_view what, std::set<int>& out,
                   std::string_view word = {}, bool* on_word = nullptr) {
    for (const auto& part : split_list(text)) {
        if (!word.empty() && part == word) {
            *on_word = true;
            continue;
        }
        const auto dash = part.find('-');
        if (dash == std::string::npos) {
            out.insert(parse_index(part, flag, what));
        } else {
            const int a = parse_index(part.substr(0, dash), flag, what),
                      b = parse_index(part.substr(dash + 1), flag, what);
            if (b < a) throw InputError(fmt::format("{}: empty range '{}'", flag, part));
            if (b - a > kMaxGeometryIndexRange)
                throw InputError(
                    fmt::format("{}: range '{}' is wider than {}", flag, part, kMaxGeometryIndexRange));
            for (int l = a; l <= b; ++l) out.insert(l);
        }
    }
}

}  // namespace

bool Selection::selects(const std::string& name, const model::TensorRole& r) const {
    if (!layers.empty() && (!r.layer || !layers.count(*r.layer))) return false;
    if (!components.empty() && !components.count(r.component)) return false;
    if (!experts.empty() || shared_experts) {
        const bool routed =
            r.expert_kind == model::ExpertKind::routed && r.expert && experts.count(*r.expert);
        const bool shared = shared_experts && r.expert_kind == model::ExpertKind::shared;
        if (!routed && !shared) return false;
    }
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
    throw_input_error(source, "",
                      fmt::format("{}: {}", nothing,
                                  selection.selects_all()
                                      ? "the checkpoint has none"
                                      : "the selection (--roles, --layers, --experts, --component, --match, "
                                        "--exclude) matches none"));
}

Selection make_selection(const SelectionText& text) {
    const auto& [roles, layers, match, exclude, experts, components] = text;
    Selection s;
    for (const auto& r : split_list(roles)) {
        auto role = model::role_from_name(r);
        if (!role) {
            std::string names;
            for (int i = 0; i <= static_cast<int>(model::Role::other); ++i)
                names += fmt::format("{}{}", i ? ", " : "", model::role_name(static_cast<model::Role>(i)));
            throw InputError(fmt::format("--roles: unknown role '{}' (expected {})", r, names));
        }
        s.roles.insert(*role);
    }
    parse_indices(layers, "--layers", "a layer index", s.layers);
    parse_indices(experts, "--experts", "an expert index or 'shared'", s.experts, "shared",
                  &s.shared_experts);
    for (const auto& c : split_list(components)) {
        const auto component = model::component_from_name(c);
        if (!component)
            throw InputError(fmt::format(
                "--component: unknown component '{}' (expected language, vision, audio, projector)", c));
        s.components.insert(*component);
    }
    if (!match.empty()) s.match.emplace(match, "--match");
    if (!exclude.empty()) s.exclude.emplace(exclude, "--exclude");
    return s;
}

}  // namespace diffract::analysis
