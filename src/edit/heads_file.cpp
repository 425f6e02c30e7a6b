// The --heads file of rewind: a CSV of layer,head rows, validated strictly.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/numbers.hpp"
#include "diffract/edit/edit.hpp"

namespace diffract::edit {
namespace {

constexpr std::size_t kMaxHeadsFileBytes = 16u << 20;
constexpr std::size_t kShownChars = 60;

// A line as it may appear in a one-line message: non-printable bytes as \xNN, long lines cut.
std::string shown(std::string_view line) {
    std::string out;
    for (std::size_t i = 0; i < line.size() && i < kShownChars; ++i) {
        const auto c = static_cast<unsigned char>(line[i]);
        if (c >= 0x20 && c < 0x7f)
            out.push_back(static_cast<char>(c));
        else
            out += fmt::format("\\x{:02x}", c);
    }
    if (line.size() > kShownChars) out += "...";
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::vector<std::string_view> fields_of(std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    while (true) {
        const auto comma = line.find(',', start);
        out.push_back(trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
        if (comma == std::string_view::npos) return out;
        start = comma + 1;
    }
}

// A non-negative decimal integer (digits only: no sign, fraction, exponent or spaces inside), at
// most kMaxHeadIndex.
constexpr int kMaxHeadIndex = 1 << 20;
std::optional<int> index_of(std::string_view f) {
    if (f.empty() || f.size() > 8) return std::nullopt;
    int v = 0;
    for (char c : f) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + (c - '0');
    }
    if (v > kMaxHeadIndex) return std::nullopt;
    return v;
}

}  // namespace

std::vector<RewindHead> parse_heads_csv(std::string_view text, const std::string& label) {
    auto fail = [&](int line_no, const std::string& what) {
        throw_input_error(label, "", fmt::format("line {}: {}", line_no, what));
    };
    std::vector<RewindHead> out;
    std::map<std::pair<int, int>, int> first_line;
    bool seen_row = false;  // a header or a data row
    std::size_t start = 0;
    for (int line_no = 1; start < text.size(); ++line_no) {
        const auto nl = text.find('\n', start);
        std::string_view line = text.substr(start, nl == std::string_view::npos ? nl : nl - start);
        start = nl == std::string_view::npos ? text.size() : nl + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find('\0') != std::string_view::npos)
            fail(line_no, fmt::format("binary data, not a CSV of layer,head rows (found '{}')", shown(line)));
        if (trim(line).empty() || trim(line).front() == '#') continue;
        for (char c : line)
            if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || static_cast<unsigned char>(c) >= 0x7f)
                fail(line_no, fmt::format("expected 'layer,head' in plain ASCII, found '{}'", shown(line)));
        const auto f = fields_of(line);
        const bool header = !seen_row && !f.empty() && !f[0].empty() && (f[0][0] < '0' || f[0][0] > '9');
        seen_row = true;
        if (header) {
            if (f.size() < 2 || f[0] != "layer" || f[1] != "head")
                fail(line_no,
                     fmt::format("expected the header 'layer,head' or a row 'layer,head', found '{}'",
                                 shown(line)));
            continue;
        }
        const auto layer = f.size() >= 2 ? index_of(f[0]) : std::nullopt;
        const auto head = f.size() >= 2 ? index_of(f[1]) : std::nullopt;
        if (!layer || !head)
            fail(line_no, fmt::format("expected 'layer,head' as integers in 0..{}, found '{}'", kMaxHeadIndex,
                                      shown(line)));
        if (auto [it, fresh] = first_line.emplace(std::pair(*layer, *head), line_no); !fresh)
            fail(line_no, fmt::format("head {} of layer {} is listed twice (first on line {})", *head, *layer,
                                      it->second));
        RewindHead h{*layer, *head, {}};
        h.ranked.layer = *layer, h.ranked.head = *head, h.ranked.rank = static_cast<int>(out.size());
        h.ranked.update_norm = kNaN;
        h.source = label;
        h.line = line_no;
        out.push_back(std::move(h));
    }
    if (out.empty()) throw_input_error(label, "", "lists no heads (expected rows 'layer,head')");
    return out;
}

std::vector<RewindHead> read_heads_file(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw_input_error(path, "", std::string("cannot open the heads file: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw_input_error(path, "", "the heads file is not a regular file");
    if (static_cast<std::uint64_t>(st.st_size) > kMaxHeadsFileBytes)
        throw_input_error(path, "",
                          fmt::format("the heads file is too large for a list of heads (expected at most {} "
                                      "bytes, found {})",
                                      kMaxHeadsFileBytes, st.st_size));
    std::ifstream in(path, std::ios::binary);
    if (!in) throw_input_error(path, "", "cannot open the heads file");
    std::ostringstream text;
    text << in.rdbuf();
    return parse_heads_csv(text.str(), path);
}

void check_heads(const std::vector<RewindHead>& heads, const formats::Checkpoint& model,
                 const analysis::Selection& selection) {
    if (!model.schema.heads)
        throw_input_error(model.path, "", "head geometry unknown (config.json): cannot rewind heads");
    // The heads file's rule for every caller (a Python list too): no head twice. (No heads at all is
    // --fraction 0, the model itself: a rewind sweep's first point.)
    std::set<std::pair<int, int>> seen;
    for (const auto& h : heads)
        if (!seen.insert({h.layer, h.head}).second)
            throw_input_error(model.path, "",
                              fmt::format("head {} of layer {} is listed twice", h.head, h.layer));
    const int n_heads = model.schema.heads->n_heads;
    // The layers whose attention projections the edit can touch, and which of Q, K, V, O each layer's
    // recognised tensors split into heads (fused ones included).
    std::set<int> layers, selected;
    std::map<int, std::set<model::Role>> split;
    for (const auto& t : model.tensors) {
        const auto r = model::classify_tensor(t.name);
        if (!r.layer || !model::role_is_attention(r.role) || t.shape.size() != 2) continue;
        layers.insert(*r.layer);
        if (selection.selects(t.name, r)) selected.insert(*r.layer);
        for (const auto& hb : model::head_blocks(model.schema, t, r.role)) split[*r.layer].insert(hb.proj);
    }
    auto where = [&](const RewindHead& h) {
        return h.line > 0 ? std::pair(h.source, fmt::format("line {}: ", h.line))
                          : std::pair(model.path, std::string());
    };
    auto range = [](const std::set<int>& s) {
        return s.empty() ? std::string("none") : fmt::format("{}..{}", *s.begin(), *s.rbegin());
    };
    for (const auto& h : heads) {
        const auto [source, prefix] = where(h);
        if (h.layer < 0 || !layers.count(h.layer))
            throw_input_error(source, "",
                              fmt::format("{}layer {} has no attention projections in {} (layers {})", prefix,
                                          h.layer, model.path, range(layers)));
        if (!selected.count(h.layer))
            throw_input_error(source, "",
                              fmt::format("{}layer {} is not selected (--layers/--roles/--match/--exclude)",
                                          prefix, h.layer));
        if (h.head < 0 || h.head >= n_heads)
            throw_input_error(source, "",
                              fmt::format("{}head {} of layer {} does not exist (expected 0..{}, found {})",
                                          prefix, h.head, h.layer, n_heads - 1, h.head));
        // A head is rewound whole or not at all: a projection whose layout is not recognised (a fused
        // QKV of an unknown arrangement is role 'other') would be left at the fine-tune's values while
        // rewound_heads.csv called the head rewound.
        std::string missing;
        for (const auto p :
             {model::Role::attn_q, model::Role::attn_k, model::Role::attn_v, model::Role::attn_o})
            if (!split[h.layer].count(p))
                missing += (missing.empty() ? "" : ", ") + std::string(model::role_name(p));
        if (!missing.empty())
            throw_input_error(
                model.path, "",
                fmt::format("layer {}: no recognised {} projection split into heads (an attention "
                            "layout diffract does not know): cannot rewind its heads whole",
                            h.layer, missing));
    }
}

}  // namespace diffract::edit
