#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/formats/gguf.hpp"
#include "formats/gguf_types_impl.hpp"

namespace diffract::formats {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

using gguf_detail::GgmlType;
using nlohmann::json;

constexpr std::uint32_t kMagic = 0x46554747;      // "GGUF" read as a little-endian u32
constexpr std::uint64_t kMaxKeyLength = 65535;    // GGUF spec: keys are at most 2^16 - 1 bytes
constexpr std::uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
constexpr std::uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, value type, one-byte value
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset

enum VType : std::uint32_t {
    kUint8 = 0,
    kInt8,
    kUint16,
    kInt16,
    kUint32,
    kInt32,
    kFloat32,
    kBool,
    kString,
    kArray,
    kUint64,
    kInt64,
    kFloat64,
    kVTypeCount
};
std::string_view vtype_name(std::uint32_t t) {
    static constexpr std::array<std::string_view, kVTypeCount> names{
        "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
        "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
    return t < kVTypeCount ? names[t] : "?";
}

// Bytes a value of type t occupies at least (exactly, for the fixed-size types).
std::uint64_t vtype_min_size(std::uint32_t t) {
    switch (t) {
        case kUint8:
        case kInt8:
        case kBool:
            return 1;
        case kUint16:
        case kInt16:
            return 2;
        case kUint32:
        case kInt32:
        case kFloat32:
            return 4;
        case kUint64:
        case kInt64:
        case kFloat64:
            return 8;
        case kString:
            return 8;  // the length
        case kArray:
            return 4 + 8;  // element type and length
        default:
            return 1;
    }
}

bool is_fixed_size(std::uint32_t t) { return t != kString && t != kArray; }

// Length of the well-formed UTF-8 sequence (RFC 3629: no overlongs, surrogates or > U+10FFFF) that
// starts at s[i], or 0 if there is none.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
    const auto c0 = static_cast<unsigned char>(s[i]);
    if (c0 < 0x80) return 1;
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c0 >= 0xC2 && c0 <= 0xDF) {
        n = 2;
        cp = c0 & 0x1Fu;
    } else if (c0 >= 0xE0 && c0 <= 0xEF) {
        n = 3;
        cp = c0 & 0x0Fu;
    } else if (c0 >= 0xF0 && c0 <= 0xF4) {
        n = 4;
        cp = c0 & 0x07u;
    } else {
        return 0;
    }
    if (s.size() - i < n) return 0;
    for (std::size_t k = 1; k < n; ++k) {
        const auto c = static_cast<unsigned char>(s[i + k]);
        if ((c & 0xC0u) != 0x80u) return 0;
        cp = (cp << 6) | (c & 0x3Fu);
    }
    if (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
    if (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
    return n;
}

bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto n = utf8_sequence(s, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

// s with every ill-formed byte replaced by U+FFFD.
std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const auto n = utf8_sequence(s, i);
        if (n == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
        } else {
            out.append(s.substr(i, n));
            i += n;
        }
    }
    return out;
}

// A name as it may appear in a one-line error message: control characters and ill-formed UTF-8
// escaped as \xNN, and cut after 120 bytes.
std::string printable(std::string_view s) {
    constexpr std::size_t kMax = 120;
    std::string out;
    std::size_t i = 0;
    while (i < s.size() && out.size() < kMax) {
        const auto c = static_cast<unsigned char>(s[i]);
        const auto n = utf8_sequence(s, i);
        if (n > 1 || (n == 1 && c >= 0x20 && c != 0x7F && c != '\\')) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += fmt::format("\\x{:02x}", c);
            ++i;
        }
    }
    if (i < s.size()) out += "...";
    return out;
}

class Parser {
public:
    Parser(std::span<const std::byte> bytes, const std::string& label) : b_(bytes), label_(label) {}

    GgufFile run() {
        GgufFile f;
        read_header(f);
        const auto tensor_count = read<std::uint64_t>("tensor count");
        const auto kv_count = read<std::uint64_t>("metadata count");
        // Bound both counts by the bytes left before anything is sized from them.
        if (kv_count > remaining() / kMinKvBytes)
            fail(fmt::format(
                "metadata count too large for the file (expected at most {} in {} remaining bytes, "
                "found {})",
                remaining() / kMinKvBytes, remaining(), kv_count));
        if (tensor_count > remaining() / kMinTensorInfoBytes)
            fail(
                fmt::format("tensor count too large for the file (expected at most {} in {} remaining bytes, "
                            "found {})",
                            remaining() / kMinTensorInfoBytes, remaining(), tensor_count));

        for (std::uint64_t i = 0; i < kv_count; ++i) read_kv(f, i);
        item_.clear();
        f.kv_end = pos_;
        apply_special_keys(f);

        for (std::uint64_t i = 0; i < tensor_count; ++i) read_tensor_info(f, i);
        item_.clear();
        tensor_.clear();

        // The data section starts at the first aligned offset after the tensor infos.
        std::uint64_t data = 0;
        if (__builtin_add_overflow(static_cast<std::uint64_t>(pos_), f.alignment - 1, &data))
            fail("data section offset overflows");
        data -= data % f.alignment;
        f.data_offset = data;
        check_tensor_ranges(f);
        return f;
    }

private:
    std::span<const std::byte> b_;
    const std::string& label_;
    std::size_t pos_ = 0;
    std::string tensor_;                      // printable name of the tensor being read, for errors
    std::string item_;                        // "metadata key 'k'" or "tensor info #i", prefixed to errors
    std::vector<std::uint64_t> rel_offsets_;  // per tensor, relative to the data section
    std::map<std::string, std::uint32_t> types_;  // metadata key -> value type
    std::unordered_set<std::string> names_;       // tensor names seen

    std::size_t remaining() const { return b_.size() - pos_; }

    [[noreturn]] void fail(const std::string& what) const {
        throw_input_error(label_, tensor_, item_.empty() ? what : fmt::format("{}: {}", item_, what));
    }

    void need(std::uint64_t n, std::string_view what) const {
        if (n > remaining())
            fail(fmt::format("truncated {} at offset {} (expected {} bytes, found {})", what, pos_, n,
                             remaining()));
    }

    template <typename T>
    T read(std::string_view what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, b_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string_view read_string(std::string_view what) {
        if (remaining() < 8)  // checked here so that the hot path formats no message
            fail(fmt::format("truncated {} length at offset {} (expected 8 bytes, found {})", what, pos_,
                             remaining()));
        const auto n = read<std::uint64_t>("string length");
        if (n > remaining())
            fail(fmt::format("{} length runs past the end of the file (expected at most {}, found {})", what,
                             remaining(), n));
        std::string_view s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<std::size_t>(n));
        pos_ += static_cast<std::size_t>(n);
        return s;
    }

    void skip(std::uint64_t n, std::string_view what) {
        need(n, what);
        pos_ += static_cast<std::size_t>(n);
    }

    void read_header(GgufFile& f) {
        if (b_.size() < 4)
            fail(fmt::format(
                "truncated header: file too short for the GGUF magic (expected 4 bytes, found {})",
                b_.size()));
        const auto magic = read<std::uint32_t>("magic");
        if (magic != kMagic) {
            std::string_view found(reinterpret_cast<const char*>(b_.data()), 4);
            fail(fmt::format("not a GGUF file: bad magic (expected \"GGUF\", found \"{}\")",
                             printable(found)));
        }
        f.version = read<std::uint32_t>("version");
        if (f.version == 2 || f.version == 3) return;
        const auto swapped = __builtin_bswap32(f.version);
        if (swapped == 2 || swapped == 3)
            fail(
                fmt::format("big-endian GGUF files are not supported (expected version 2 or 3, found {} "
                            "byte-swapped)",
                            swapped));
        if (f.version == 1)
            fail(
                "GGUF version 1 is not supported, convert the file with a current llama.cpp (expected 2 or "
                "3, "
                "found 1)");
        fail(fmt::format("unsupported GGUF version (expected 2 or 3, found {})", f.version));
    }

    std::uint32_t read_vtype(std::string_view what) {
        const auto t = read<std::uint32_t>(what);
        if (t >= kVTypeCount)
            fail(fmt::format("unknown {} (expected 0..{}, found {})", what, kVTypeCount - 1, t));
        return t;
    }

    // Reads one value of type t. depth: arrays enclosing it. keep = false parses and validates without
    // building JSON (elements of a summarised array).
    json read_value(std::uint32_t t, int depth, bool keep) {
        switch (t) {
            case kUint8:
                return json(read<std::uint8_t>("UINT8 value"));
            case kInt8:
                return json(read<std::int8_t>("INT8 value"));
            case kUint16:
                return json(read<std::uint16_t>("UINT16 value"));
            case kInt16:
                return json(read<std::int16_t>("INT16 value"));
            case kUint32:
                return json(read<std::uint32_t>("UINT32 value"));
            case kInt32:
                return json(read<std::int32_t>("INT32 value"));
            case kUint64:
                return json(read<std::uint64_t>("UINT64 value"));
            case kInt64:
                return json(read<std::int64_t>("INT64 value"));
            case kFloat32:
                return json(static_cast<double>(read<float>("FLOAT32 value")));
            case kFloat64:
                return json(read<double>("FLOAT64 value"));
            case kBool: {
                const auto v = read<std::uint8_t>("BOOL value");
                if (v > 1) fail(fmt::format("bool value is not 0 or 1 (expected 0 or 1, found {})", v));
                return json(v == 1);
            }
            case kString: {
                const auto s = read_string("string");
                return keep ? json(sanitize_utf8(s)) : json();
            }
            case kArray:
                return read_array(depth + 1, keep);
            default:
                fail(fmt::format("unknown value type (expected 0..{}, found {})", kVTypeCount - 1, t));
        }
    }

    json read_array(int depth, bool keep) {
        if (depth > kGgufMaxArrayDepth)
            fail(fmt::format("arrays nested too deeply (expected at most {} levels, found {})",
                             kGgufMaxArrayDepth, depth));
        const auto et = read_vtype("array element type");
        const auto n = read<std::uint64_t>("array length");
        const auto min = vtype_min_size(et);
        if (n > remaining() / min)
            fail(
                fmt::format("array length too large for the file (expected at most {} {} elements in {} "
                            "remaining bytes, found {})",
                            remaining() / min, vtype_name(et), remaining(), n));
        const bool inline_array = keep && n <= kGgufMaxInlineArray;
        if (!inline_array && is_fixed_size(et) && et != kBool) {
            skip(n * min, "array data");  // n * min <= remaining(): no overflow
        } else {
            json out = inline_array ? json::array() : json();
            for (std::uint64_t i = 0; i < n; ++i) {
                auto v = read_value(et, depth, inline_array);
                if (inline_array) out.push_back(std::move(v));
            }
            if (inline_array) return out;
        }
        if (!keep) return json();
        return json{{"gguf_array_type", vtype_name(et)}, {"length", n}};
    }

    void read_kv(GgufFile& f, std::uint64_t index) {
        item_ = fmt::format("metadata key #{}", index);
        const auto key = read_string("key");
        if (key.size() > kMaxKeyLength)
            fail(
                fmt::format("key too long (expected at most {} bytes, found {})", kMaxKeyLength, key.size()));
        if (!valid_utf8(key)) fail(fmt::format("key '{}' is not valid UTF-8", printable(key)));
        item_ = fmt::format("metadata key '{}'", printable(key));
        const std::string k(key);
        if (f.metadata.contains(k)) fail("duplicate key");
        const auto t = read_vtype("value type");
        types_[k] = t;
        f.metadata[k] = read_value(t, 0, true);
    }

    void apply_special_keys(GgufFile& f) {
        if (auto it = types_.find("general.alignment"); it != types_.end()) {
            item_ = "metadata key 'general.alignment'";
            if (it->second != kUint32)
                fail(fmt::format("wrong value type (expected UINT32, found {})", vtype_name(it->second)));
            const auto a = f.metadata["general.alignment"].get<std::uint32_t>();
            if (a == 0 || !std::has_single_bit(a))
                fail(fmt::format("alignment is not a non-zero power of two (expected e.g. 32, found {})", a));
            f.alignment = a;
        }
        if (auto it = types_.find("general.architecture"); it != types_.end()) {
            item_ = "metadata key 'general.architecture'";
            if (it->second != kString)
                fail(fmt::format("wrong value type (expected STRING, found {})", vtype_name(it->second)));
            f.architecture = f.metadata["general.architecture"].get<std::string>();
        }
    }

    void read_tensor_info(GgufFile& f, std::uint64_t index) {
        item_ = fmt::format("tensor info #{}", index);
        tensor_.clear();
        const auto name = read_string("tensor name");
        if (!valid_utf8(name)) fail(fmt::format("tensor name '{}' is not valid UTF-8", printable(name)));
        tensor_ = printable(name);
        item_.clear();
        if (!names_.insert(std::string(name)).second) fail("duplicate tensor name");

        const auto n_dims = read<std::uint32_t>("n_dims");
        if (n_dims < 1 || n_dims > kMaxDims)
            fail(fmt::format("n_dims out of range (expected 1..{}, found {})", kMaxDims, n_dims));
        std::array<std::uint64_t, kMaxDims> ne{};
        std::uint64_t numel = 1;
        for (std::uint32_t d = 0; d < n_dims; ++d) {
            ne[d] = read<std::uint64_t>("dimensions");
            if (ne[d] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                fail(fmt::format("dimension ne[{}] is negative as int64 (expected at most {}, found {})", d,
                                 std::numeric_limits<std::int64_t>::max(), ne[d]));
        }
        std::vector<std::int64_t> shape;
        for (std::uint32_t d = n_dims; d-- > 0;) shape.push_back(static_cast<std::int64_t>(ne[d]));
        for (std::uint32_t d = 0; d < n_dims; ++d) {
            if (__builtin_mul_overflow(numel, ne[d], &numel) ||
                numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                fail(fmt::format("element count of shape {} overflows int64", shape_string(shape)));
        }

        const auto type_id = read<std::uint32_t>("ggml type");
        const GgmlType* type = gguf_detail::find_ggml_type(type_id);
        if (type == nullptr)
            fail(fmt::format("unknown ggml type id (expected a known ggml type, found {})", type_id));
        if (ne[0] % type->block_size != 0)
            fail(fmt::format(
                "row length is not a multiple of the {} block size (expected a multiple of {}, found {})",
                type->name, type->block_size, ne[0]));
        std::uint64_t nbytes = 0;
        if (__builtin_mul_overflow(numel / type->block_size, type->type_size, &nbytes) ||
            nbytes > std::numeric_limits<std::size_t>::max())
            fail(fmt::format("byte size of shape {} of type {} overflows", shape_string(shape), type->name));

        const auto offset = read<std::uint64_t>("data offset");
        if (offset % f.alignment != 0)
            fail(fmt::format(
                "data offset is not a multiple of the alignment (expected a multiple of {}, found {})",
                f.alignment, offset));

        TensorInfo t;
        t.name = std::string(name);
        t.shape = std::move(shape);
        t.nbytes = static_cast<std::size_t>(nbytes);
        if (type->dtype) {
            t.dtype = *type->dtype;
        } else {
            t.dtype = DType::U8;
            f.unsupported_types[t.name] = std::string(type->name);
        }
        f.tensors.push_back(std::move(t));
        f.ggml_types.push_back(type_id);
        rel_offsets_.push_back(offset);
    }

    void check_tensor_ranges(GgufFile& f) {
        const std::uint64_t size = b_.size();
        std::vector<std::uint64_t> end(f.tensors.size());
        for (std::size_t i = 0; i < f.tensors.size(); ++i) {
            auto& t = f.tensors[i];
            tensor_ = printable(t.name);
            std::uint64_t begin = 0;
            if (__builtin_add_overflow(f.data_offset, rel_offsets_[i], &begin) ||
                __builtin_add_overflow(begin, static_cast<std::uint64_t>(t.nbytes), &end[i]) || end[i] > size)
                fail(fmt::format(
                    "data runs past the end of the file (expected end <= {}, found data section {} + "
                    "offset {} + {} bytes)",
                    size, f.data_offset, rel_offsets_[i], t.nbytes));
            t.offset = static_cast<std::size_t>(begin);
        }
        std::vector<std::size_t> order(f.tensors.size());
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            const auto& ta = f.tensors[a];
            const auto& tb = f.tensors[b];
            return ta.offset != tb.offset ? ta.offset < tb.offset : end[a] < end[b];
        });
        for (std::size_t k = 1; k < order.size(); ++k) {
            const auto prev = order[k - 1];
            const auto cur = order[k];
            if (f.tensors[cur].offset < end[prev]) {
                tensor_ = printable(f.tensors[cur].name);
                fail(fmt::format("data overlaps tensor '{}' (expected begin >= {}, found {})",
                                 printable(f.tensors[prev].name), end[prev], f.tensors[cur].offset));
            }
        }
        tensor_.clear();
    }
};

}  // namespace

GgufFile parse_gguf_bytes(std::span<const std::byte> bytes, const std::string& label) {
    auto f = Parser(bytes, label).run();
    undo_gguf_rope_layout(f);
    return f;
}

GgufFile parse_gguf(std::shared_ptr<const MappedFile> file) {
    auto f = parse_gguf_bytes(file->bytes(), file->path());
    for (auto& t : f.tensors) t.file = file;
    f.file = std::move(file);
    return f;
}

GgufFile open_gguf(const std::string& path) { return parse_gguf(MappedFile::open(path)); }

std::string gguf_type_name(const GgufFile& f, const TensorInfo& t) {
    if (auto it = f.unsupported_types.find(t.name); it != f.unsupported_types.end()) return it->second;
    for (const auto& g : gguf_detail::kGgmlTypes) {
        if (g.dtype == t.dtype) return std::string(g.name);
    }
    return std::string(dtype_name(t.dtype));
}

}  // namespace diffract::formats
