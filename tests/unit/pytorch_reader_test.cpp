// The malformed-input corpus for torch.save archives: the zip directory, the restricted unpickler,
// the archive's tensors, and the file kinds told apart by their first bytes. Archives and pickles are
// assembled here byte by byte (a minimal zip writer, pickle opcodes), so each defect is one change.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "diffract/core/error.hpp"
#include "diffract/formats/file_kind.hpp"
#include "diffract/formats/pytorch.hpp"

using namespace diffract;
using formats::FileKind;

namespace {

using Bytes = std::vector<std::byte>;

Bytes bytes_of(const std::string& s) {
    Bytes b(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) b[i] = static_cast<std::byte>(s[i]);
    return b;
}

void put(std::string& s, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}

struct Entry {
    std::string name, data;
    std::uint16_t method = 0;
    std::uint16_t flags = 0;
};

// A zip archive of the entries (no compression is performed: method is only recorded).
std::string zip(const std::vector<Entry>& entries) {
    std::string out, cd;
    for (const auto& e : entries) {
        const auto offset = out.size();
        put(out, 0x04034b50, 4);
        put(out, 20, 2);
        put(out, e.flags, 2);
        put(out, e.method, 2);
        put(out, 0, 4);  // time, date
        put(out, 0, 4);  // crc (not checked)
        put(out, e.data.size(), 4);
        put(out, e.data.size(), 4);
        put(out, e.name.size(), 2);
        put(out, 0, 2);
        out += e.name + e.data;
        put(cd, 0x02014b50, 4);
        put(cd, 20, 2);
        put(cd, 20, 2);
        put(cd, e.flags, 2);
        put(cd, e.method, 2);
        put(cd, 0, 4);
        put(cd, 0, 4);
        put(cd, e.data.size(), 4);
        put(cd, e.data.size(), 4);
        put(cd, e.name.size(), 2);
        put(cd, 0, 2);
        put(cd, 0, 2);
        put(cd, 0, 2);
        put(cd, 0, 2);
        put(cd, 0, 4);
        put(cd, offset, 4);
        cd += e.name;
    }
    const auto cd_offset = out.size();
    out += cd;
    put(out, 0x06054b50, 4);
    put(out, 0, 4);
    put(out, entries.size(), 2);
    put(out, entries.size(), 2);
    put(out, cd.size(), 4);
    put(out, cd_offset, 4);
    put(out, 0, 2);
    return out;
}

// Pickle opcodes.
std::string str(const std::string& s) {
    std::string o = "X";
    put(o, s.size(), 4);
    return o + s;
}
std::string num(std::int64_t v) {
    if (v >= 0 && v < 256) return std::string("K") + static_cast<char>(v);
    std::string o = "\x8a\x08";
    put(o, static_cast<std::uint64_t>(v), 8);
    return o;
}
std::string tuple(const std::vector<std::int64_t>& v) {
    std::string o = "(";
    for (auto x : v) o += num(x);
    return o + "t";
}
std::string global(const std::string& module, const std::string& name) {
    return "c" + module + "\n" + name + "\n";
}

// _rebuild_tensor_v2(storage(key, numel), offset, shape, stride, False, OrderedDict())
std::string tensor(const std::string& key, std::int64_t numel, std::int64_t offset,
                   const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride,
                   const std::string& storage_class = "FloatStorage") {
    return global("torch._utils", "_rebuild_tensor_v2") + "((" + str("storage") +
           global("torch", storage_class) + str(key) + str("cpu") + num(numel) + "tQ" + num(offset) +
           tuple(shape) + tuple(stride) + "\x89" + global("collections", "OrderedDict") + ")Rt" + "R";
}

std::string dict_of(const std::vector<std::pair<std::string, std::string>>& items) {
    std::string o = "\x80\x02}(";
    for (const auto& [k, v] : items) o += str(k) + v;
    return o + "u.";
}

std::string floats(int n) { return std::string(static_cast<std::size_t>(n) * 4, '\x01'); }

std::string archive(const std::string& pkl, std::vector<Entry> data = {{"archive/data/0", floats(12)}}) {
    std::vector<Entry> entries{{"archive/data.pkl", pkl}, {"archive/byteorder", "little"}};
    entries.insert(entries.end(), data.begin(), data.end());
    entries.push_back({"archive/version", "3\n"});
    return zip(entries);
}

const std::string w12 = tensor("0", 12, 0, {3, 4}, {4, 1});

template <class F>
std::string error_of(F f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

std::string archive_error(const std::string& file) {
    return error_of([&] { formats::parse_pytorch_archive(bytes_of(file), "m.bin"); });
}
std::string zip_error(const std::string& file) {
    return error_of([&] { formats::parse_zip_directory(bytes_of(file), "m.zip"); });
}
std::string pickle_error(const std::string& pkl) {
    return error_of([&] { formats::parse_torch_pickle(bytes_of(pkl), "data.pkl"); });
}

#define EXPECT_HAS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

}  // namespace

TEST(PytorchArchive, LocatesContiguousAndStridedTensors) {
    const auto file = archive(dict_of(
        {{"w", w12}, {"t", tensor("0", 12, 0, {4, 3}, {1, 4})}, {"s", tensor("0", 12, 4, {2, 4}, {4, 1})}}));
    const auto tensors = formats::parse_pytorch_archive(bytes_of(file), "m.bin");
    ASSERT_EQ(tensors.size(), 3u);
    EXPECT_EQ(tensors[0].pickled.name, "w");
    EXPECT_TRUE(tensors[0].contiguous);
    EXPECT_EQ(tensors[0].nbytes, 48u);
    EXPECT_EQ(file.substr(tensors[0].offset, 48), floats(12));
    EXPECT_FALSE(tensors[1].contiguous);
    EXPECT_TRUE(tensors[2].contiguous);
    EXPECT_EQ(tensors[2].offset, tensors[0].offset + 16);
}

TEST(PytorchArchive, RejectsEachDefect) {
    EXPECT_HAS(archive_error(archive(dict_of({{"w", w12}}), {{"archive/data/0", floats(12), 8}})),
               "compressed");
    EXPECT_HAS(archive_error(archive(dict_of({{"w", w12}}), {})),
               "tensor 'w': storage 'archive/data/0' is missing");
    EXPECT_HAS(archive_error(archive(dict_of({{"w", tensor("0", 12, 1, {3, 4}, {4, 1})}}))),
               "beyond its storage");
    EXPECT_HAS(archive_error(archive(dict_of({{"w", tensor("0", 12, 0, {3, 4}, {5, 1})}}))),
               "beyond its storage");
    EXPECT_HAS(archive_error(archive(dict_of({{"w", tensor("0", 12, 8, {3, 4}, {-4, 1})}}))),
               "negative stride");
    EXPECT_HAS(archive_error(archive(dict_of({{"w", tensor("0", 12, 0, {1 << 20, 1 << 20}, {1 << 20, 1})}}))),
               "more bytes than its storage");
    EXPECT_HAS(archive_error(archive(dict_of({{"w", tensor("0", 12, 0, {1LL << 40, 1LL << 40}, {1, 1})}}))),
               "overflows");
    EXPECT_HAS(archive_error(archive(dict_of({{"w", tensor("0", 13, 0, {3, 4}, {4, 1})}}))), "size differs");
    EXPECT_HAS(archive_error(zip({{"archive/data.pkl", dict_of({{"w", w12}})},
                                  {"archive/byteorder", "big"},
                                  {"archive/data/0", floats(12)}})),
               "big-endian");
    EXPECT_HAS(archive_error(zip({{"readme.txt", "hi"}})), "not a torch.save checkpoint");
    EXPECT_HAS(archive_error(zip({{"a.npy", "x"}})), "NumPy .npz");
    EXPECT_HAS(archive_error(zip({{"m/data.pkl", dict_of({})}, {"m/constants.pkl", ""}})), "TorchScript");
}

TEST(ZipDirectory, RejectsEachDefect) {
    const auto good = zip({{"a/b", "0123"}, {"a/c", "45"}});
    EXPECT_EQ(formats::parse_zip_directory(bytes_of(good), "m.zip").size(), 2u);
    EXPECT_HAS(zip_error(good.substr(0, good.size() - 5)), "end-of-central-directory");
    EXPECT_HAS(zip_error(""), "too short");
    EXPECT_HAS(zip_error(zip({{"../x", "1"}})), "leaves the archive");
    EXPECT_HAS(zip_error(zip({{"/abs", "1"}})), "not a relative path");
    EXPECT_HAS(zip_error(zip({{"a", "1"}, {"a", "2"}})), "appears twice");
    EXPECT_HAS(zip_error(zip({{"a", "1", 0, 1}})), "encrypted");
    auto lying = good;  // the first entry's central-directory sizes claim 4000 bytes
    const auto cd = lying.find("PK\x01\x02");
    lying.replace(cd + 20, 8, std::string("\xa0\x0f\0\0\xa0\x0f\0\0", 8));
    EXPECT_HAS(zip_error(lying), "runs past");
    auto overlap = good;  // the second entry's local header offset points into the first entry
    const auto cd2 = overlap.find("PK\x01\x02", cd + 4);
    overlap[cd2 + 42] = '\x01';
    EXPECT_NE(zip_error(overlap), "");
}

TEST(TorchPickle, AllowListAndStateDictRule) {
    EXPECT_HAS(pickle_error("\x80\x02" + global("os", "system") + str("id") + "\x85R."), "'os.system'");
    EXPECT_HAS(pickle_error("\x80\x02" + global("builtins", "eval") + str("1") + "\x85R."),
               "'builtins.eval'");
    EXPECT_HAS(pickle_error("\x80\x02" + global("torch", "load") + "."), "'torch.load'");
    EXPECT_HAS(pickle_error("\x80\x02}\x8f."), "opcode 0x8f");
    EXPECT_HAS(pickle_error("\x80\x02h\x05."), "memo key 5");
    EXPECT_HAS(pickle_error("\x80\x02s."), "underflow");
    EXPECT_HAS(pickle_error("\x80\x02\x8a\x09" + std::string(9, '\1') + "."), "64 bits");
    EXPECT_HAS(pickle_error("(dp0\n."), "PROTO");
    EXPECT_HAS(pickle_error(dict_of({{"w", w12}, {"w", w12}})), "duplicate key");
    EXPECT_HAS(pickle_error(dict_of({{"w", tensor(std::string(100, 'k'), 12, 0, {3, 4}, {4, 1})}})),
               "storage key of 100 bytes");
    EXPECT_HAS(pickle_error(dict_of({{"w", tensor("../0", 12, 0, {3, 4}, {4, 1})}})),
               "not a plain entry name");
    EXPECT_HAS(pickle_error("\x80\x02" + w12 + "."), "single tensor");
    // A complex or quantized tensor is refused under its name: where it gets its key in the dict.
    const auto complex_w = tensor("0", 12, 0, {3, 4}, {4, 1}, "ComplexFloatStorage");
    EXPECT_HAS(pickle_error(dict_of({{"ok", w12}, {"w", complex_w}})), "tensor 'w'");
    EXPECT_HAS(pickle_error(dict_of({{"w", complex_w}})),
               "torch.ComplexFloatStorage is not a supported dtype");
    const auto complex_v3 = global("torch._utils", "_rebuild_tensor_v3") + "((" + str("storage") +
                            global("torch", "UntypedStorage") + str("1") + str("cpu") + num(8) + "tQ" +
                            num(0) + tuple({1}) + tuple({1}) + "\x89" + "}" + global("torch", "complex64") +
                            "tR";
    EXPECT_HAS(pickle_error(dict_of({{"c", complex_v3}})), "tensor 'c'");
    EXPECT_HAS(pickle_error("\x80\x02}(" + num(1) + complex_w + "u."), "the integer 1");
    EXPECT_HAS(pickle_error("\x80\x02}(" + num(7) + w12 + "u."), "the integer 7, not a string");
    // One that never gets a name (in a list) is still refused.
    EXPECT_HAS(pickle_error("\x80\x02}(" + str("w") + w12 + str("l") + "](" + complex_w + "eu."),
               "not a supported dtype");
    EXPECT_HAS(pickle_error(dict_of({{"w", w12}, {"v", tensor("0", 6, 0, {6}, {1})}})), "described twice");
    // Nested: the top dict holds no tensor, "state_dict" is preferred; two unnamed candidates are refused.
    const auto inner = "}(" + str("w") + w12 + "u";
    const auto nested =
        "\x80\x02}(" + str("ema") + inner + str("state_dict") + inner + str("epoch") + num(3) + "u.";
    EXPECT_EQ(formats::parse_torch_pickle(bytes_of(nested), "p").size(), 1u);
    EXPECT_HAS(pickle_error("\x80\x02}(" + str("a") + inner + str("b") + inner + "u."), "'a', 'b'");
    // v3 over an untyped storage, with its dtype.
    const auto v3 = global("torch._utils", "_rebuild_tensor_v3") + "((" + str("storage") +
                    global("torch", "UntypedStorage") + str("1") + str("cpu") + num(8) + "tQ" + num(0) +
                    tuple({4}) + tuple({1}) + "\x89" + "}" + global("torch", "bfloat16") + "tR";
    const auto t = formats::parse_torch_pickle(bytes_of(dict_of({{"h", v3}})), "p");
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].dtype, DType::BF16);
    EXPECT_EQ(t[0].storage_bytes, 8u);
}

TEST(FileKind, TellsFormatsApartByTheirBytes) {
    auto kind = [](const std::string& s) { return formats::detect_file_kind(bytes_of(s), s.size()); };
    EXPECT_EQ(kind("GGUF\x03"), FileKind::gguf);
    EXPECT_EQ(kind(archive(dict_of({}))), FileKind::zip);
    EXPECT_EQ(kind(zip({{"arr_0.npy", "x"}})), FileKind::numpy_npz);
    EXPECT_EQ(kind(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14) + "."),
              FileKind::legacy_torch);
    EXPECT_EQ(kind("\x80\x04\x95"), FileKind::pickle);
    EXPECT_EQ(kind("\x93NUMPY\x01"), FileKind::numpy_npy);
    EXPECT_EQ(kind("\x89HDF\r\n\x1a\n"), FileKind::hdf5);
    EXPECT_EQ(kind(std::string("\x08\x08\x12\x07pytorch", 11)), FileKind::onnx);
    std::string st;
    put(st, 2, 8);
    EXPECT_EQ(kind(st + "{}"), FileKind::safetensors);
    std::string pickle_like;  // a 1408-byte header: its length starts 0x80 0x05, like pickle protocol 5
    put(pickle_like, 0x580, 8);
    EXPECT_EQ(kind(pickle_like + "{" + std::string(0x57f, ' ')), FileKind::safetensors);
    EXPECT_EQ(kind("hello world"), FileKind::unknown);
    EXPECT_HAS(formats::unsupported_kind_message(FileKind::unknown, bytes_of("hello")), "68 65 6c 6c 6f");
}
