// A restricted unpickler for torch.save's data.pkl: a small interpreter over the pickle opcodes a
// state dict is written with (protocols 2-5), whose only "callables" are the allow-listed torch and
// collections globals, each interpreted here (a tensor becomes a description of its storage view).
// Nothing from the file is ever executed; any other global is refused by name when it is read.
//
// Values live in an arena and refer to each other by index, so that a hostile pickle (a list that
// holds itself, nesting a million deep) neither leaks nor recurses on destruction; the walk over the
// result is depth-bounded.
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/formats/pytorch.hpp"

namespace diffract::formats {
namespace {

enum class Kind : std::uint8_t {
    none,
    boolean,
    integer,
    floating,
    string,
    bytes,
    tuple,
    list,
    dict,    // items: key, value, key, value, ...
    global,  // a callable or type from the allow-list: text = "module.name"
    storage,
    tensor,
    // A storage, tensor or dtype diffract does not read (complex, quantized): text = why. It is refused
    // where it gets its name in a dict, so that the message names the tensor.
    refused,
};

struct Value {
    Kind kind = Kind::none;
    std::int64_t i = 0;  // integer, boolean; storage: index into storages_; tensor: index into tensors_
    std::string text;    // string, bytes, global
    std::vector<std::uint32_t> items;
};

struct Storage {
    std::string key;
    std::optional<DType> dtype;  // empty: untyped (bytes; the tensor's dtype comes from _rebuild_tensor_v3)
    std::uint64_t bytes = 0;
};

struct Tensor {
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape, stride;
    std::uint64_t storage_offset = 0;
    std::uint32_t storage = 0;
};

bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || s.size() - i < n) return false;
        std::uint32_t cp = n == 1 ? c : c & (0x7Fu >> n);
        for (std::size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0u) != 0x80u) return false;
            cp = (cp << 6) | (d & 0x3Fu);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        i += n;
    }
    return true;
}

// Torch dtypes by the name their GLOBAL carries (torch.float32 pickles as "torch\nfloat32").
std::optional<DType> torch_dtype(std::string_view name) {
    static const std::map<std::string_view, DType> k{
        {"float32", DType::F32},
        {"float", DType::F32},
        {"float64", DType::F64},
        {"double", DType::F64},
        {"float16", DType::F16},
        {"half", DType::F16},
        {"bfloat16", DType::BF16},
        {"int64", DType::I64},
        {"long", DType::I64},
        {"int32", DType::I32},
        {"int", DType::I32},
        {"int16", DType::I16},
        {"short", DType::I16},
        {"int8", DType::I8},
        {"uint8", DType::U8},
        {"bool", DType::BOOL},
        {"float8_e4m3fn", DType::F8_E4M3},
        {"float8_e5m2", DType::F8_E5M2},
        {"uint16", DType::U16},
        {"uint32", DType::U32},
        {"uint64", DType::U64},
    };
    const auto it = k.find(name);
    return it == k.end() ? std::nullopt : std::optional(it->second);
}

// The legacy typed storage classes (torch.FloatStorage, ...) and their element dtype.
std::optional<DType> storage_class_dtype(std::string_view name) {
    static const std::map<std::string_view, DType> k{
        {"FloatStorage", DType::F32},     {"DoubleStorage", DType::F64}, {"HalfStorage", DType::F16},
        {"BFloat16Storage", DType::BF16}, {"LongStorage", DType::I64},   {"IntStorage", DType::I32},
        {"ShortStorage", DType::I16},     {"CharStorage", DType::I8},    {"ByteStorage", DType::U8},
        {"BoolStorage", DType::BOOL},
    };
    const auto it = k.find(name);
    return it == k.end() ? std::nullopt : std::optional(it->second);
}

// Globals a state dict needs; everything else is refused by name.
bool allowed_global(std::string_view module, std::string_view name) {
    if (module == "collections") return name == "OrderedDict";
    if (module == "torch._utils")
        return name == "_rebuild_tensor_v2" || name == "_rebuild_tensor_v3" || name == "_rebuild_parameter" ||
               name == "_rebuild_parameter_with_state";
    if (module == "torch._tensor") return name == "_rebuild_from_type_v2";
    if (module == "torch.nn.parameter") return name == "Parameter";
    if (module == "torch.storage") return name == "UntypedStorage";
    if (module == "torch")
        return name == "Tensor" || name == "Size" || name == "UntypedStorage" || storage_class_dtype(name) ||
               torch_dtype(name);
    return false;
}

class Unpickler {
public:
    Unpickler(std::span<const std::byte> b, const std::string& label) : b_(b), label_(label) {}

    std::vector<PickledTensor> run() {
        const auto root = interpret();
        return state_dict(root);
    }

private:
    std::span<const std::byte> b_;
    const std::string& label_;
    std::size_t pos_ = 0;
    std::vector<Value> arena_;
    std::vector<std::uint32_t> stack_;
    std::vector<std::size_t> marks_;
    std::map<std::uint64_t, std::uint32_t> memo_;
    std::vector<Storage> storages_;
    std::map<std::string, std::uint32_t> storage_by_key_;
    std::vector<Tensor> tensors_;
    // The string keys of each dict, for duplicates: indices into the arena compared by text, so that one
    // long key memoised into many dicts is never copied.
    struct ByText {
        const std::vector<Value>* arena;
        bool operator()(std::uint32_t a, std::uint32_t b) const {
            return (*arena)[a].text < (*arena)[b].text;
        }
    };
    std::map<std::uint32_t, std::set<std::uint32_t, ByText>> dict_keys_;

    std::optional<std::string> first_refusal_;

    // A value as a message may quote it: an integer or a string as itself, anything else by kind.
    std::string describe(std::uint32_t v) {
        const auto& x = at(v);
        switch (x.kind) {
            case Kind::integer:
                return fmt::format("the integer {}", x.i);
            case Kind::string:
                return "'" + x.text + "'";
            case Kind::none:
                return "None";
            case Kind::tuple:
                return "a tuple";
            default:
                return "a non-string value";
        }
    }

    [[noreturn]] void fail(const std::string& what, const std::string& tensor = "") const {
        throw_input_error(label_, tensor, what);
    }

    // --- reading the stream ---
    std::span<const std::byte> take(std::uint64_t n) {
        if (n > b_.size() - pos_)
            fail(fmt::format("pickle truncated at byte {} (an argument of {} bytes runs past the end)", pos_,
                             n));
        const auto s = b_.subspan(pos_, n);
        pos_ += n;
        return s;
    }
    std::uint64_t uint_le(int n) {
        const auto s = take(n);
        std::uint64_t v = 0;
        for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(s[i]);
        return v;
    }
    std::string line() {
        std::string s;
        while (true) {
            const auto c = static_cast<char>(take(1)[0]);
            if (c == '\n') return s;
            if (s.size() > 256) fail("pickle GLOBAL name longer than 256 bytes");
            s += c;
        }
    }

    // --- values ---
    std::uint32_t make(Value v) {
        if (arena_.size() >= 0xFFFFFFF0u) fail("pickle holds too many values");
        arena_.push_back(std::move(v));
        return static_cast<std::uint32_t>(arena_.size() - 1);
    }
    std::uint32_t make(Kind k, std::int64_t i = 0, std::string text = {}) {
        Value v;
        v.kind = k;
        v.i = i;
        v.text = std::move(text);
        return make(std::move(v));
    }
    Value& at(std::uint32_t v) { return arena_[v]; }
    std::uint32_t pop() {
        if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
            fail(fmt::format("pickle stack underflow at byte {}", pos_));
        const auto v = stack_.back();
        stack_.pop_back();
        return v;
    }
    std::uint32_t top() {
        if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
            fail(fmt::format("pickle stack underflow at byte {}", pos_));
        return stack_.back();
    }
    std::vector<std::uint32_t> pop_mark() {
        if (marks_.empty()) fail(fmt::format("pickle opcode at byte {} needs a MARK", pos_ - 1));
        const auto m = marks_.back();
        marks_.pop_back();
        std::vector<std::uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
        stack_.resize(m);
        return items;
    }
    std::uint32_t make_container(Kind k, std::vector<std::uint32_t> items) {
        Value v;
        v.kind = k;
        v.items = std::move(items);
        return make(std::move(v));
    }
    void set_items(std::uint32_t dict, const std::vector<std::uint32_t>& kv) {
        if (at(dict).kind != Kind::dict) fail("pickle SETITEM(S) on a value that is not a dict");
        if (kv.size() % 2) fail("pickle SETITEMS with an odd number of items");
        for (std::size_t i = 0; i < kv.size(); i += 2) {
            const auto& key = at(kv[i]);
            if (at(kv[i + 1]).kind == Kind::refused) {
                if (key.kind == Kind::string) fail(at(kv[i + 1]).text, key.text);
                fail(fmt::format("{} (under the key {})", at(kv[i + 1]).text, describe(kv[i])));
            }
            if (key.kind == Kind::string &&
                !dict_keys_.try_emplace(dict, ByText{&arena_}).first->second.insert(kv[i]).second)
                fail("duplicate key in a pickled dict", key.text);
            at(dict).items.push_back(kv[i]);
            at(dict).items.push_back(kv[i + 1]);
        }
    }
    void append(std::uint32_t list, const std::vector<std::uint32_t>& items) {
        if (at(list).kind != Kind::list) fail("pickle APPEND(S) on a value that is not a list");
        at(list).items.insert(at(list).items.end(), items.begin(), items.end());
    }

    std::int64_t integer(std::uint32_t v, const char* what) {
        if (at(v).kind != Kind::integer) fail(fmt::format("{} is not an integer", what));
        return at(v).i;
    }
    std::vector<std::int64_t> int_tuple(std::uint32_t v, const char* what) {
        if (at(v).kind != Kind::tuple && at(v).kind != Kind::list)
            fail(fmt::format("{} is not a tuple", what));
        std::vector<std::int64_t> out;
        for (auto x : at(v).items) out.push_back(integer(x, what));
        return out;
    }
    const std::vector<std::uint32_t>& args_of(std::uint32_t v, const std::string& fn) {
        if (at(v).kind != Kind::tuple) fail(fmt::format("arguments of {} are not a tuple", fn));
        return at(v).items;
    }

    // --- the allow-listed callables ---
    std::uint32_t persistent_load(std::uint32_t pid) {
        const auto& p = at(pid);
        if (p.kind != Kind::tuple || p.items.size() != 5 || at(p.items[0]).kind != Kind::string ||
            at(p.items[0]).text != "storage")
            fail("persistent id is not ('storage', type, key, location, numel)");
        const auto& type = at(p.items[1]);
        if (type.kind == Kind::refused) return p.items[1];
        if (type.kind != Kind::global) fail("persistent id's storage type is not a storage class");
        Storage s;
        const auto name = std::string_view(type.text).substr(type.text.rfind('.') + 1);
        if (name == "UntypedStorage") {
            s.dtype = std::nullopt;
        } else if (auto d = storage_class_dtype(name);
                   d && type.text.starts_with("torch.") && type.text.find('.') == type.text.rfind('.')) {
            s.dtype = d;
        } else {
            fail(
                fmt::format("persistent id's storage type '{}' is not a supported storage class", type.text));
        }
        if (at(p.items[2]).kind != Kind::string) fail("persistent id's storage key is not a string");
        if (at(p.items[2]).text.size() > 64)
            fail(
                fmt::format("storage key of {} bytes is not a plain entry name", at(p.items[2]).text.size()));
        s.key = at(p.items[2]).text;
        if (s.key.empty() || s.key.find('/') != std::string::npos || s.key == "..")
            fail(fmt::format("storage key '{}' is not a plain entry name", s.key));
        if (at(p.items[3]).kind != Kind::string) fail("persistent id's location is not a string");
        const auto numel = integer(p.items[4], "storage numel");
        const std::uint64_t item = s.dtype ? dtype_size(*s.dtype) : 1;
        if (numel < 0 || __builtin_mul_overflow(static_cast<std::uint64_t>(numel), item, &s.bytes))
            fail(fmt::format("storage '{}' has an impossible size ({} elements)", s.key, numel));
        if (auto it = storage_by_key_.find(s.key); it != storage_by_key_.end()) {
            const auto& old = storages_[at(it->second).i];
            if (old.dtype != s.dtype || old.bytes != s.bytes)
                fail(fmt::format("storage '{}' is described twice with different types or sizes", s.key));
            return it->second;
        }
        storages_.push_back(std::move(s));
        const auto v = make(Kind::storage, static_cast<std::int64_t>(storages_.size() - 1));
        storage_by_key_[storages_.back().key] = v;
        return v;
    }

    std::uint32_t rebuild_tensor(const std::vector<std::uint32_t>& a, bool v3) {
        const char* fn = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
        if (a.size() < (v3 ? 7u : 6u) || a.size() > (v3 ? 8u : 7u))
            fail(fmt::format("{} called with {} arguments", fn, a.size()));
        if (at(a[0]).kind == Kind::refused) return a[0];
        if (v3 && at(a[6]).kind == Kind::refused) return a[6];
        if (at(a[0]).kind != Kind::storage) fail(fmt::format("{}: first argument is not a storage", fn));
        Tensor t;
        t.storage = static_cast<std::uint32_t>(at(a[0]).i);
        const auto& s = storages_[t.storage];
        if (v3) {
            if (at(a[6]).kind != Kind::global || !at(a[6]).text.starts_with("torch."))
                fail(fmt::format("{}: dtype argument is not a torch dtype", fn));
            const auto d = torch_dtype(std::string_view(at(a[6]).text).substr(6));
            if (!d) fail(fmt::format("{}: '{}' is not a supported dtype", fn, at(a[6]).text));
            if (s.dtype && *s.dtype != *d)
                fail(fmt::format("{}: dtype {} differs from its typed storage's", fn, at(a[6]).text));
            t.dtype = *d;
        } else {
            t.dtype = s.dtype.value_or(DType::U8);
        }
        const auto offset = integer(a[1], "storage offset");
        if (offset < 0) fail(fmt::format("negative storage offset {}", offset));
        t.storage_offset = static_cast<std::uint64_t>(offset);
        t.shape = int_tuple(a[2], "tensor size");
        t.stride = int_tuple(a[3], "tensor stride");
        if (t.shape.size() != t.stride.size())
            fail(
                fmt::format("tensor size has {} dimensions, its stride {}", t.shape.size(), t.stride.size()));
        if (at(a[4]).kind != Kind::boolean) fail(fmt::format("{}: requires_grad is not a bool", fn));
        tensors_.push_back(std::move(t));
        return make(Kind::tensor, static_cast<std::int64_t>(tensors_.size() - 1));
    }

    // A REDUCE (or NEWOBJ) of an allow-listed global.
    std::uint32_t call(std::uint32_t callable, std::uint32_t args) {
        if (at(callable).kind == Kind::refused) fail(at(callable).text);
        if (at(callable).kind != Kind::global) fail("pickle REDUCE of a value that is not an allowed global");
        const std::string fn = at(callable).text;
        const auto a = args_of(args, fn);
        if (fn == "collections.OrderedDict") {
            if (!a.empty()) fail("collections.OrderedDict called with arguments");
            return make_container(Kind::dict, {});
        }
        if (fn == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(a, false);
        if (fn == "torch._utils._rebuild_tensor_v3") return rebuild_tensor(a, true);
        if (fn == "torch._utils._rebuild_parameter" || fn == "torch._utils._rebuild_parameter_with_state") {
            if (a.size() != (fn.ends_with("state") ? 4u : 3u) ||
                (at(a[0]).kind != Kind::tensor && at(a[0]).kind != Kind::refused))
                fail(fmt::format("{} called with other arguments than (tensor, requires_grad, hooks)", fn));
            return a[0];
        }
        if (fn == "torch._tensor._rebuild_from_type_v2") {
            if (a.size() != 4 || at(a[0]).kind != Kind::global || at(a[1]).kind != Kind::global)
                fail(fmt::format("{} called with other arguments than (func, type, args, state)", fn));
            if (at(a[1]).text != "torch.Tensor" && at(a[1]).text != "torch.nn.parameter.Parameter")
                fail(fmt::format("{}: tensor subclass '{}' is not supported", fn, at(a[1]).text));
            if (!at(a[0]).text.starts_with("torch._utils._rebuild_tensor_v"))
                fail(fmt::format("{}: rebuild function '{}' is not supported", fn, at(a[0]).text));
            const auto inner = call(a[0], a[2]);
            if (at(inner).kind != Kind::tensor && at(inner).kind != Kind::refused)
                fail(fmt::format("{}: the rebuilt value is not a tensor", fn));
            return inner;
        }
        if (fn == "torch.Size") {
            if (a.size() != 1) fail("torch.Size called with other arguments than one tuple");
            int_tuple(a[0], "torch.Size");
            return a[0];
        }
        fail(fmt::format("global '{}' cannot be called (only read as a type)", fn));
    }

    // BUILD sets an object's state: an OrderedDict's attributes (state_dict's _metadata) and a
    // tensor's (a Parameter's) are dropped; nothing else takes state.
    void build(std::uint32_t obj, std::uint32_t state) {
        const auto k = at(obj).kind;
        if (k != Kind::dict && k != Kind::tensor && k != Kind::refused)
            fail(fmt::format("pickle BUILD on a value that is not a dict or tensor (at byte {})", pos_ - 1));
        if (at(state).kind != Kind::dict && at(state).kind != Kind::none && at(state).kind != Kind::tuple)
            fail(fmt::format("pickle BUILD with a state that is not a dict (at byte {})", pos_ - 1));
    }

    std::uint32_t memo_get(std::uint64_t key) {
        const auto it = memo_.find(key);
        if (it == memo_.end()) fail(fmt::format("pickle memo key {} was never stored", key));
        return it->second;
    }

    std::uint32_t interpret() {
        if (b_.size() < 2 || static_cast<std::uint8_t>(b_[0]) != 0x80)
            fail("data.pkl does not start with a pickle PROTO opcode");
        while (true) {
            const auto op_at = pos_;
            const auto op = static_cast<std::uint8_t>(take(1)[0]);
            switch (op) {
                case 0x80: {  // PROTO
                    const auto v = uint_le(1);
                    if (v < 2 || v > 5) fail(fmt::format("pickle protocol {} is not supported (2 to 5)", v));
                    break;
                }
                case 0x95:  // FRAME: a length hint only
                    uint_le(8);
                    break;
                case '.':  // STOP
                    if (stack_.size() != 1 || !marks_.empty())
                        fail("pickle STOP with other than exactly one value on the stack");
                    return stack_.back();
                case '(':  // MARK
                    if (marks_.size() > 10000) fail("pickle nests MARKs more than 10000 deep");
                    marks_.push_back(stack_.size());
                    break;
                case 'c': {  // GLOBAL
                    const auto module = line();
                    const auto name = line();
                    push_global(module, name);
                    break;
                }
                case 0x93: {  // STACK_GLOBAL
                    const auto name = pop(), module = pop();
                    if (at(name).kind != Kind::string || at(module).kind != Kind::string)
                        fail("pickle STACK_GLOBAL of values that are not strings");
                    push_global(at(module).text, at(name).text);
                    break;
                }
                case 'Q': {  // BINPERSID
                    const auto pid = pop();
                    stack_.push_back(persistent_load(pid));
                    break;
                }
                case 'R': {  // REDUCE
                    const auto args = pop(), callable = pop();
                    stack_.push_back(call(callable, args));
                    break;
                }
                case 0x81: {  // NEWOBJ: cls.__new__(cls, *args), for the same classes
                    const auto args = pop(), cls = pop();
                    stack_.push_back(call(cls, args));
                    break;
                }
                case 'b': {  // BUILD
                    const auto state = pop();
                    build(top(), state);
                    break;
                }
                case ')':
                    stack_.push_back(make_container(Kind::tuple, {}));
                    break;
                case 't':
                    stack_.push_back(make_container(Kind::tuple, pop_mark()));
                    break;
                case 0x85:
                case 0x86:
                case 0x87: {  // TUPLE1..3
                    std::vector<std::uint32_t> items(op - 0x84);
                    for (auto i = items.size(); i-- > 0;) items[i] = pop();
                    stack_.push_back(make_container(Kind::tuple, std::move(items)));
                    break;
                }
                case ']':
                    stack_.push_back(make_container(Kind::list, {}));
                    break;
                case 'l':
                    stack_.push_back(make_container(Kind::list, pop_mark()));
                    break;
                case 'a': {  // APPEND
                    const auto v = pop();
                    append(top(), {v});
                    break;
                }
                case 'e': {  // APPENDS
                    const auto items = pop_mark();
                    append(top(), items);
                    break;
                }
                case '}':
                    stack_.push_back(make_container(Kind::dict, {}));
                    break;
                case 'd': {  // DICT
                    const auto items = pop_mark();
                    const auto d = make_container(Kind::dict, {});
                    set_items(d, items);
                    stack_.push_back(d);
                    break;
                }
                case 's': {  // SETITEM
                    const auto v = pop(), k = pop();
                    set_items(top(), {k, v});
                    break;
                }
                case 'u': {  // SETITEMS
                    const auto items = pop_mark();
                    set_items(top(), items);
                    break;
                }
                case 'N':
                    stack_.push_back(make(Kind::none));
                    break;
                case 0x88:
                case 0x89:
                    stack_.push_back(make(Kind::boolean, op == 0x88));
                    break;
                case 'J':
                    stack_.push_back(make(Kind::integer, static_cast<std::int32_t>(uint_le(4))));
                    break;
                case 'K':
                    stack_.push_back(make(Kind::integer, static_cast<std::int64_t>(uint_le(1))));
                    break;
                case 'M':
                    stack_.push_back(make(Kind::integer, static_cast<std::int64_t>(uint_le(2))));
                    break;
                case 0x8a: {  // LONG1: n bytes of two's complement, little-endian
                    const auto n = uint_le(1);
                    if (n > 8) fail(fmt::format("pickle integer of {} bytes does not fit 64 bits", n));
                    std::uint64_t v = n ? uint_le(static_cast<int>(n)) : 0;
                    if (n && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~std::uint64_t{0} << (8 * n);
                    stack_.push_back(make(Kind::integer, static_cast<std::int64_t>(v)));
                    break;
                }
                case 'G': {  // BINFLOAT: big-endian double, kept only as a marker
                    take(8);
                    stack_.push_back(make(Kind::floating));
                    break;
                }
                case 'X':
                case 0x8c:
                case 0x8d: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
                    const auto n = uint_le(op == 'X' ? 4 : op == 0x8c ? 1 : 8);
                    const auto s = take(n);
                    stack_.push_back(
                        make(Kind::string, 0, std::string(reinterpret_cast<const char*>(s.data()), n)));
                    break;
                }
                case 'B':
                case 'C':
                case 0x8e: {  // BINBYTES, SHORT_BINBYTES, BINBYTES8
                    const auto n = uint_le(op == 'B' ? 4 : op == 'C' ? 1 : 8);
                    const auto s = take(n);
                    stack_.push_back(
                        make(Kind::bytes, 0, std::string(reinterpret_cast<const char*>(s.data()), n)));
                    break;
                }
                case 'q':
                    memo_[uint_le(1)] = top();
                    break;
                case 'r':
                    memo_[uint_le(4)] = top();
                    break;
                case 0x94:  // MEMOIZE
                    memo_[memo_.size()] = top();
                    break;
                case 'h':
                    stack_.push_back(memo_get(uint_le(1)));
                    break;
                case 'j':
                    stack_.push_back(memo_get(uint_le(4)));
                    break;
                default:
                    fail(fmt::format(
                        "pickle opcode 0x{:02x} at byte {} is not supported (a state dict does not "
                        "need it; nothing is executed)",
                        op, op_at));
            }
        }
    }

    void push_global(const std::string& module, const std::string& name) {
        if (module == "torch" &&
            (name.ends_with("Storage") || name.starts_with("complex") || name.starts_with("qint") ||
             name.starts_with("quint")) &&
            !allowed_global(module, name)) {
            auto why = fmt::format(
                "torch.{} is not a supported dtype (diffract reads real floating, integer and bool "
                "tensors; complex and quantized ones are not)",
                name);
            if (!first_refusal_) first_refusal_ = why;
            stack_.push_back(make(Kind::refused, 0, std::move(why)));
            return;
        }
        if (!allowed_global(module, name))
            fail(
                fmt::format("refusing pickle global '{}.{}': only tensors and state-dict containers are read "
                            "(nothing is executed)",
                            module, name));
        stack_.push_back(make(Kind::global, 0, module + "." + name));
    }

    // --- the state dict in the result ---
    bool holds_tensors(std::uint32_t dict) {
        const auto& items = at(dict).items;
        for (std::size_t j = 1; j < items.size(); j += 2)
            if (at(items[j]).kind == Kind::tensor) return true;
        return false;
    }

    std::vector<PickledTensor> state_dict(std::uint32_t root) {
        if (first_refusal_) fail(*first_refusal_);  // one that never got a name in a dict
        if (at(root).kind == Kind::tensor)
            fail("data.pkl holds a single tensor, not a state dict (save a dict of named tensors)");
        if (at(root).kind != Kind::dict) fail("data.pkl holds no dict of tensors (not a state dict)");
        std::uint32_t chosen = root;
        if (!holds_tensors(root)) {
            // One level down: {"state_dict": {...}, "epoch": 3}, {"model": {...}, "optimizer": {...}}.
            std::vector<std::pair<std::string, std::uint32_t>> candidates;
            const auto& items = at(root).items;
            for (std::size_t j = 0; j < items.size(); j += 2)
                if (at(items[j + 1]).kind == Kind::dict && holds_tensors(items[j + 1]))
                    candidates.emplace_back(at(items[j]).kind == Kind::string ? at(items[j]).text : "?",
                                            items[j + 1]);
            if (candidates.empty()) fail("data.pkl holds no dict of tensors (not a state dict)");
            std::optional<std::uint32_t> pick;
            if (candidates.size() == 1) pick = candidates[0].second;
            for (const char* preferred : {"state_dict", "model", "module"}) {
                if (pick) break;
                for (const auto& [k, v] : candidates)
                    if (k == preferred) pick = v;
            }
            if (!pick) {
                std::string keys;
                for (const auto& [k, v] : candidates) keys += (keys.empty() ? "'" : ", '") + k + "'";
                fail(
                    fmt::format("data.pkl holds several dicts of tensors ({}) and none is named state_dict, "
                                "model or module",
                                keys));
            }
            chosen = *pick;
        }
        std::vector<PickledTensor> out;
        const auto& items = at(chosen).items;
        for (std::size_t j = 0; j < items.size(); j += 2) {
            if (at(items[j + 1]).kind != Kind::tensor) continue;  // non-tensor entries are not weights
            if (at(items[j]).kind != Kind::string)
                fail(fmt::format("a tensor's key in the state dict is {}, not a string", describe(items[j])));
            const auto& t = tensors_[at(items[j + 1]).i];
            const auto& s = storages_[t.storage];
            PickledTensor p;
            p.name = at(items[j]).text;
            if (p.name.empty()) fail("a tensor has an empty name");
            if (!valid_utf8(p.name)) fail("a tensor's name is not valid UTF-8");
            p.dtype = t.dtype;
            p.shape = t.shape;
            p.stride = t.stride;
            p.storage_offset = t.storage_offset;
            p.storage_key = s.key;
            p.storage_bytes = s.bytes;
            out.push_back(std::move(p));
        }
        return out;
    }
};

}  // namespace

std::vector<PickledTensor> parse_torch_pickle(std::span<const std::byte> bytes, const std::string& label) {
    return Unpickler(bytes, label).run();
}

}  // namespace diffract::formats
