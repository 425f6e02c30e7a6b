#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diffract/core/error.hpp"
#include "diffract/core/json_bounded.hpp"
#include "diffract/formats/safetensors.hpp"

namespace diffract::formats {
namespace {

using nlohmann::json;

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
    return __builtin_mul_overflow(a, b, out);
}

SafetensorsEntry parse_entry(const std::string& label, const std::string& name, const json& v) {
    auto fail = [&](const std::string& what) { throw_input_error(label, name, what); };
    if (!v.is_object()) fail("header entry is not a JSON object");
    SafetensorsEntry e;
    e.name = name;
    const auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) fail("missing or non-string 'dtype'");
    const auto dtype = dtype_from_name(dt->get<std::string>());
    if (!dtype) fail(fmt::format("unknown dtype '{}'", dt->get<std::string>()));
    e.dtype = *dtype;

    const auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) fail("missing or non-array 'shape'");
    std::uint64_t numel = 1;
    for (const auto& d : *sh) {
        if (!d.is_number_integer()) fail("shape holds a non-integer");
        if (d.is_number_unsigned() ? false : d.get<std::int64_t>() < 0)
            fail(fmt::format("negative dimension in shape {}", sh->dump()));
        const auto dim = d.get<std::uint64_t>();
        if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
            mul_overflows(numel, dim, &numel))
            fail(fmt::format("shape {} overflows", sh->dump()));
        e.shape.push_back(static_cast<std::int64_t>(dim));
    }
    std::uint64_t expected_bytes = 0;
    if (mul_overflows(numel, dtype_size(e.dtype), &expected_bytes))
        fail(fmt::format("shape {} overflows", sh->dump()));

    const auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
        fail("'data_offsets' is not a pair of non-negative integers");
    e.begin = (*off)[0].get<std::uint64_t>();
    e.end = (*off)[1].get<std::uint64_t>();
    if (e.end < e.begin) fail(fmt::format("data_offsets [{}, {}] end before begin", e.begin, e.end));
    if (e.end - e.begin != expected_bytes)
        fail(fmt::format("byte length does not match dtype and shape (expected {}, found {})", expected_bytes,
                         e.end - e.begin));
    return e;
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& label) {
    if (file.size() < 8)
        throw_input_error(label, "",
                          fmt::format("file too short for a safetensors header ({} bytes)", file.size()));
    SafetensorsHeader h;
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(file[i]);  // little-endian
    if (n > kSafetensorsMaxHeader)
        throw_input_error(label, "", fmt::format("header length {} exceeds the 100 MB limit", n));
    if (n > file.size() - 8)
        throw_input_error(
            label, "",
            fmt::format("header length {} runs past the end of the file ({} bytes)", n, file.size()));
    h.header_size = n;
    const auto* text = reinterpret_cast<const char*>(file.data() + 8);

    // nlohmann keeps the last of duplicate keys silently; a parse callback sees every top-level key.
    std::set<std::string> seen;
    std::string duplicate;
    json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::key && depth == 1) {
            auto key = parsed.get<std::string>();
            if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
        }
        return true;
    };
    check_json_depth(std::string_view(text, n), label);
    json header;
    try {
        header = json::parse(text, text + n, on_event);
    } catch (const json::exception& e) {
        throw_input_error(label, "", fmt::format("header is not valid JSON ({})", e.what()));
    }
    if (!duplicate.empty()) throw_input_error(label, duplicate, "duplicate tensor name in header");
    if (!header.is_object()) throw_input_error(label, "", "header is not a JSON object");

    const std::uint64_t data_size = file.size() - 8 - n;
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it->is_object()) throw_input_error(label, "", "__metadata__ is not an object");
            for (auto m = it->begin(); m != it->end(); ++m) {
                if (!m->is_string())
                    throw_input_error(label, "",
                                      fmt::format("__metadata__ value of '{}' is not a string", m.key()));
                h.metadata[m.key()] = m->get<std::string>();
            }
            continue;
        }
        h.tensors.push_back(parse_entry(label, it.key(), *it));
    }
    std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t cursor = 0;
    for (const auto& t : h.tensors) {
        if (t.end > data_size)
            throw_input_error(label, t.name,
                              fmt::format("data_offsets [{}, {}] run past the data section ({} bytes)",
                                          t.begin, t.end, data_size));
        if (t.begin < cursor)
            throw_input_error(
                label, t.name,
                fmt::format("data overlaps the previous tensor (begin {} < {})", t.begin, cursor));
        if (t.begin > cursor)
            throw_input_error(
                label, t.name,
                fmt::format("hole in the data section (expected begin {}, found {})", cursor, t.begin));
        cursor = t.end;
    }
    if (cursor != data_size)
        throw_input_error(
            label, "",
            fmt::format("data section size does not match the tensors (expected {} bytes, found {})", cursor,
                        data_size));
    return h;
}

SafetensorsFile open_safetensors(const std::string& path) {
    SafetensorsFile out;
    out.file = MappedFile::open(path);
    const auto header = parse_safetensors(out.file->bytes(), path);
    out.metadata = header.metadata;
    out.tensors.reserve(header.tensors.size());
    for (const auto& e : header.tensors) {
        TensorInfo t;
        t.name = e.name;
        t.dtype = e.dtype;
        t.shape = e.shape;
        t.file = out.file;
        t.offset = header.data_start() + e.begin;
        t.nbytes = e.end - e.begin;
        out.tensors.push_back(std::move(t));
    }
    return out;
}

}  // namespace diffract::formats
