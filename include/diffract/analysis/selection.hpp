// Which tensors a command works on: one selection grammar for every command.
//   --roles attn_q,mlp_down      roles (see model::Role)
//   --layers 0-3,7               layer indices and inclusive ranges
//   --experts 0-7,shared         routed experts by index and range, `shared` for the shared experts
//   --component language,vision  the language model, or a tower (model::Component)
//   --match REGEX / --exclude REGEX on tensor names (RE2 syntax, core/pattern.hpp; searched anywhere in
//                                the name)
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "diffract/core/pattern.hpp"
#include "diffract/model/schema.hpp"

namespace diffract::analysis {

struct Selection {
    std::set<model::Role> roles;  // empty: all
    std::set<int> layers;         // empty: all (tensors without a layer are kept only when empty)
    // Routed experts by index, and the shared experts: when either is given, only those expert
    // matrices are selected (tensors that are no expert's are not).
    std::set<int> experts;
    bool shared_experts = false;
    std::set<model::Component> components;  // empty: all
    std::optional<Pattern> match, exclude;
    // Matrices of a type or scheme that is not decoded are skipped (and counted in a warning) instead of
    // ending the run (--allow-partial).
    bool allow_partial = false;

    bool selects(const std::string& tensor_name, const model::TensorRole& role) const;
    // A block's role (e.g. attn_q for the query slice of a fused qkv) also counts as selected.
    bool selects_role(model::Role role) const { return roles.empty() || roles.count(role); }
    bool selects_all() const {
        return roles.empty() && layers.empty() && experts.empty() && !shared_experts && components.empty() &&
               !match && !exclude;
    }
};

// A run with nothing to work on is refused, never an empty success: throws InputError
// "<source>: <nothing>: <why>", the why being the selection flags when any were given.
[[noreturn]] void throw_nothing_selected(std::string_view source, const Selection& selection,
                                         std::string_view nothing);

// The selection flags as the CLI and Python spell them (--roles a,b --layers 0-3 --match RE --exclude RE
// --experts 0-7,shared
// --component vision).
struct SelectionText {
    std::string roles, layers, match, exclude, experts, components;
};

// Parses the flag values; throws InputError naming the flag.
Selection make_selection(const SelectionText& text);

}  // namespace diffract::analysis
