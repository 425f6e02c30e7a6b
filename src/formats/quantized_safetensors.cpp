#include "diffract/formats/quantized_safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/core/quantized.hpp"

namespace diffract::formats {
namespace {

using Json = nlohmann::json;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The values of an I32 or I64 tensor (the caller checked the dtype).
std::vector<std::int64_t> integers_of(const TensorInfo& t) {
    std::vector<std::int64_t> out(static_cast<std::size_t>(t.numel()));
    const auto* b = t.bytes().data();
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (t.dtype == DType::I64) {
            std::memcpy(&out[i], b + 8 * i, 8);
        } else {
            std::int32_t v;
            std::memcpy(&v, b + 4 * i, 4);
            out[i] = v;
        }
    }
    return out;
}

std::string dims(std::int64_t a, std::int64_t b) { return fmt::format("{}×{}", a, b); }

// The tensors of a checkpoint by name, and which of them a pairing consumed.
class Pairing {
public:
    explicit Pairing(Checkpoint& ck) : ck_(ck) {
        for (std::size_t i = 0; i < ck.tensors.size(); ++i) index_[ck.tensors[i].name] = i;
    }
    const TensorInfo* find(const std::string& name) const {
        const auto it = index_.find(name);
        return it == index_.end() ? nullptr : &ck_.tensors[it->second];
    }
    const TensorInfo& need(const std::string& name, const TensorInfo& for_tensor,
                           std::string_view scheme) const {
        const auto* t = find(name);
        if (!t)
            throw_input_error(for_tensor.path(), for_tensor.name,
                              fmt::format("{} weight without its tensor '{}'", scheme, name));
        return *t;
    }
    void consume(const std::string& name) { consumed_.insert(name); }
    // A logical matrix replacing the stored tensor `stored` (which is consumed).
    void add(const std::string& stored, TensorInfo logical) {
        consumed_.insert(stored);
        added_[stored].push_back(std::move(logical));
    }
    // The new tensor list: logical matrices where their stored tensors were, consumed ones dropped.
    void apply() {
        std::vector<TensorInfo> out;
        for (auto& t : ck_.tensors) {
            if (auto a = added_.find(t.name); a != added_.end())
                for (auto& l : a->second) out.push_back(std::move(l));
            if (!consumed_.count(t.name)) out.push_back(std::move(t));
        }
        ck_.tensors = std::move(out);
    }
    const std::vector<TensorInfo>& tensors() const { return ck_.tensors; }

private:
    Checkpoint& ck_;
    std::map<std::string, std::size_t> index_;
    std::set<std::string> consumed_;
    std::map<std::string, std::vector<TensorInfo>> added_;
};

[[noreturn]] void refuse(const TensorInfo& t, const std::string& what) {
    throw_input_error(t.path(), t.name, what);
}

void require_dtype(const TensorInfo& t, std::initializer_list<DType> allowed, std::string_view scheme) {
    if (std::find(allowed.begin(), allowed.end(), t.dtype) != allowed.end()) return;
    std::string names;
    for (auto d : allowed) names += fmt::format("{}{}", names.empty() ? "" : " or ", dtype_name(d));
    refuse(t, fmt::format("{} tensor of dtype {} (expected {})", scheme, dtype_name(t.dtype), names));
}

void require_shape(const TensorInfo& t, const std::vector<std::int64_t>& shape, std::string_view scheme) {
    if (t.shape != shape)
        refuse(t, fmt::format("{} tensor of shape {} (expected {})", scheme, shape_string(t.shape),
                              shape_string(shape)));
}

// ---- FP8 and int8 with a scale grid ------------------------------------------------------------

// The region of the weight one scale covers, from the scale's shape (and the configured block or
// group size, which must agree with it).
std::pair<std::int64_t, std::int64_t> scale_block(const TensorInfo& w, const TensorInfo& s,
                                                  std::optional<std::pair<std::int64_t, std::int64_t>> block,
                                                  std::optional<std::int64_t> group,
                                                  std::string_view scheme) {
    const std::int64_t out = w.shape[0], in = w.shape[1];
    if (s.numel() == 1 && !block && !group) return {out, in};
    const std::int64_t s0 = s.shape.empty() ? 1 : s.shape[0], s1 = s.shape.size() >= 2 ? s.shape[1] : 1;
    if (s.shape.size() > 2)
        refuse(s, fmt::format("{} scale of shape {} (expected at most 2 dimensions)", scheme,
                              shape_string(s.shape)));
    if (block) {
        if (s0 != ceil_div(out, block->first) || s1 != ceil_div(in, block->second))
            refuse(s, fmt::format("{} block scale of shape {} does not tile the weight {} in blocks of {} "
                                  "(expected [{}, {}])",
                                  scheme, shape_string(s.shape), shape_string(w.shape),
                                  dims(block->first, block->second), ceil_div(out, block->first),
                                  ceil_div(in, block->second)));
        return *block;
    }
    if (s0 == out && s1 == 1) return {1, in};
    if (s0 == out && in % s1 == 0) {
        if (group && *group != in / s1)
            refuse(s,
                   fmt::format("{} group scale of shape {} does not match group_size {} (expected [{}, {}])",
                               scheme, shape_string(s.shape), *group, out, ceil_div(in, *group)));
        return {1, in / s1};
    }
    // No configured block: the smallest power-of-two blocks that give the scale's shape.
    auto fit = [](std::int64_t n, std::int64_t parts) -> std::int64_t {
        for (std::int64_t b = 1; b <= n; b *= 2)
            if (ceil_div(n, b) == parts) return b;
        return 0;
    };
    const auto b0 = fit(out, s0), b1 = fit(in, s1);
    if (b0 == 0 || b1 == 0)
        refuse(s, fmt::format("{} scale of shape {} does not tile the weight {} (expected [1], [{}, 1], "
                              "[{}, groups] or block scales)",
                              scheme, shape_string(s.shape), shape_string(w.shape), out, out));
    return {b0, b1};
}

std::string granularity(const QuantizedWeight& q) {
    if (q.block_rows == q.rows && q.block_cols == q.cols) return "per-tensor";
    if (q.block_rows == 1 && q.block_cols == q.cols) return "per-channel";
    if (q.block_rows == 1) return fmt::format("group {}", q.block_cols);
    return fmt::format("block {}", dims(q.block_rows, q.block_cols));
}

void pair_scaled(Pairing& p, const TensorInfo& w, const TensorInfo& s,
                 std::optional<std::pair<std::int64_t, std::int64_t>> block,
                 std::optional<std::int64_t> group, std::string_view scheme) {
    if (w.shape.size() != 2)
        refuse(w,
               fmt::format("{} weight of shape {} (expected 2 dimensions)", scheme, shape_string(w.shape)));
    require_dtype(s, {DType::F32, DType::BF16, DType::F16, DType::F64}, scheme);
    auto q = std::make_shared<QuantizedWeight>();
    q->scheme = QuantScheme::fp8;
    q->rows = w.shape[0], q->cols = w.shape[1];
    q->codes = w, q->scale = s;
    std::tie(q->block_rows, q->block_cols) = scale_block(w, s, block, group, scheme);
    q->description =
        fmt::format("{} {}, {}", w.dtype == DType::I8 ? "int8" : "fp8",
                    w.dtype == DType::F8_E4M3 ? "e4m3" : (w.dtype == DType::F8_E5M2 ? "e5m2" : "symmetric"),
                    granularity(*q));
    if (w.dtype == DType::I8) q->description = "int8 " + granularity(*q);
    p.consume(s.name);
    p.add(w.name, decoded_matrix(w.name, std::move(q)));
}

// Every column's group of a group-index tensor (GPTQ g_idx, compressed-tensors weight_g_idx) names one of
// `groups` groups, checked once here so that decoding indexes freely. Returns whether the order departs
// from c / group_size (act-order).
bool check_group_index(const TensorInfo& index, std::int64_t groups, std::int64_t group_size) {
    const auto idx = integers_of(index);
    bool ordered = false;
    for (std::size_t c = 0; c < idx.size(); ++c) {
        if (idx[c] < 0 || idx[c] >= groups)
            refuse(index,
                   fmt::format("g_idx[{}] = {} names no group (expected 0..{})", c, idx[c], groups - 1));
        ordered = ordered || idx[c] != static_cast<std::int64_t>(c) / group_size;
    }
    return ordered;
}

// ---- configuration ------------------------------------------------------------------------------

std::optional<std::int64_t> int_key(const Json& j, const char* key, const std::string& label) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer())
        throw_input_error(label, "", fmt::format("quantization_config: key '{}' is not an integer", key));
    const auto v = it->get<std::int64_t>();
    if (v < -1 || v > (std::int64_t{1} << 24))
        throw_input_error(label, "",
                          fmt::format("quantization_config: key '{}' out of range (found {})", key, v));
    return v;
}

std::string string_key(const Json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<std::pair<std::int64_t, std::int64_t>> block_key(const Json& j, const char* key,
                                                               const std::string& label) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
        !(*it)[1].is_number_integer() || (*it)[0].get<std::int64_t>() < 1 ||
        (*it)[1].get<std::int64_t>() < 1 || (*it)[0].get<std::int64_t>() > (1 << 24) ||
        (*it)[1].get<std::int64_t>() > (1 << 24))
        throw_input_error(label, "",
                          fmt::format("quantization_config: key '{}' is not two positive integers", key));
    return std::pair{(*it)[0].get<std::int64_t>(), (*it)[1].get<std::int64_t>()};
}

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

std::string strip(std::string_view s, std::string_view suffix) {
    return std::string(s.substr(0, s.size() - suffix.size()));
}

// ---- schemes ------------------------------------------------------------------------------------

// FP8 (and int8) weights beside their scales: transformers' fine-grained FP8 (weight_scale_inv),
// compressed-tensors float-/int-quantized and fbgemm (weight_scale). Also the rule for a lone file.
void pair_fp8(Pairing& p, std::optional<std::pair<std::int64_t, std::int64_t>> block,
              std::optional<std::int64_t> group, bool int8) {
    for (const auto& t : p.tensors()) {
        if (!ends_with(t.name, ".weight")) continue;
        const bool codes =
            t.dtype == DType::F8_E4M3 || t.dtype == DType::F8_E5M2 || (int8 && t.dtype == DType::I8);
        if (!codes) continue;
        const auto* s = p.find(t.name + "_scale_inv");
        if (!s) s = p.find(t.name + "_scale");
        if (!s) continue;  // a scale-free cast: the codes are the values
        if (p.find(t.name + "_zero_point"))
            refuse(t, "compressed-tensors asymmetric quantization (weight_zero_point) is not decoded");
        pair_scaled(p, t, *s, block, group, t.dtype == DType::I8 ? "int8" : "fp8");
    }
}

void pair_packed_int(Pairing& p, int bits, std::optional<std::int64_t> group, const std::string& label) {
    if (bits != 4 && bits != 8 && bits != 2)
        throw_input_error(
            label, "",
            fmt::format("compressed-tensors pack-quantized with {} bits is not decoded (expected 2, 4 or 8)",
                        bits));
    for (const auto& t : p.tensors()) {
        if (!ends_with(t.name, ".weight_packed")) continue;
        const auto x = strip(t.name, "_packed");
        require_dtype(t, {DType::I32}, "pack-quantized");
        const auto& shape = p.need(x + "_shape", t, "pack-quantized");
        const auto& s = p.need(x + "_scale", t, "pack-quantized");
        if (p.find(x + "_zero_point"))
            refuse(t, "compressed-tensors pack-quantized with zero points (asymmetric) is not decoded");
        require_dtype(shape, {DType::I32, DType::I64}, "pack-quantized");
        if (shape.numel() != 2) refuse(shape, "pack-quantized weight_shape is not two integers");
        const auto rc = integers_of(shape);
        for (const auto v : rc)
            if (v < 1 || v > (std::int64_t{1} << 31))
                refuse(shape,
                       fmt::format("pack-quantized weight_shape holds {} (expected a positive size)", v));
        require_shape(t, {rc[0], ceil_div(rc[1] * bits, 32)}, "pack-quantized");
        require_dtype(s, {DType::F32, DType::BF16, DType::F16}, "pack-quantized");
        auto q = std::make_shared<QuantizedWeight>();
        q->scheme = QuantScheme::packed_int;
        q->rows = rc[0], q->cols = rc[1], q->bits = bits;
        q->codes = t, q->scale = s;
        if (s.shape.size() != 2 || s.shape[0] != rc[0])
            refuse(s, fmt::format("pack-quantized scale of shape {} (expected [{}, groups])",
                                  shape_string(s.shape), rc[0]));
        q->block_cols = group && *group > 0 ? *group : ceil_div(rc[1], s.shape[1]);
        if (ceil_div(rc[1], q->block_cols) != s.shape[1])
            refuse(s, fmt::format(
                          "pack-quantized scale of shape {} does not match group size {} (expected [{}, {}])",
                          shape_string(s.shape), q->block_cols, rc[0], ceil_div(rc[1], q->block_cols)));
        if (const auto* g = p.find(x + "_g_idx")) {
            require_dtype(*g, {DType::I32, DType::I64}, "pack-quantized");
            require_shape(*g, {rc[1]}, "pack-quantized");
            check_group_index(*g, s.shape[1], q->block_cols);
            q->group_index = *g;
            p.consume(g->name);
        }
        q->description =
            fmt::format("compressed-tensors int{} {}{}", bits,
                        q->block_cols >= q->cols ? "per-channel" : fmt::format("group {}", q->block_cols),
                        q->group_index ? ", act-order" : "");
        p.consume(shape.name), p.consume(s.name);
        p.add(t.name, decoded_matrix(x, std::move(q)));
    }
}

void pair_nvfp4(Pairing& p) {
    for (const auto& t : p.tensors()) {
        if (!ends_with(t.name, ".weight_packed")) continue;
        const auto x = strip(t.name, "_packed");
        require_dtype(t, {DType::U8}, "nvfp4");
        const auto& s = p.need(x + "_scale", t, "nvfp4");
        const auto& g = p.need(x + "_global_scale", t, "nvfp4");
        if (t.shape.size() != 2) refuse(t, "nvfp4 weight_packed is not 2-dimensional");
        const std::int64_t rows = t.shape[0], cols = t.shape[1] * 2;
        if (cols % 16) refuse(t, fmt::format("nvfp4 weight of {} columns (expected a multiple of 16)", cols));
        require_dtype(s, {DType::F8_E4M3}, "nvfp4");
        require_shape(s, {rows, cols / 16}, "nvfp4");
        require_dtype(g, {DType::F32, DType::BF16, DType::F16}, "nvfp4");
        if (g.numel() != 1) refuse(g, "nvfp4 global scale is not one value");
        auto q = std::make_shared<QuantizedWeight>();
        q->scheme = QuantScheme::nvfp4;
        q->rows = rows, q->cols = cols, q->block_cols = 16;
        q->codes = t, q->scale = s, q->global_scale = g;
        q->description = "nvfp4, group 16";
        p.consume(s.name), p.consume(g.name);
        p.add(t.name, decoded_matrix(x, std::move(q)));
    }
}

void pair_gptq_awq(Pairing& p, bool awq, int bits, std::int64_t group, bool v1, bool act_order) {
    const std::string_view scheme = awq ? "awq" : "gptq";
    for (const auto& t : p.tensors()) {
        if (!ends_with(t.name, ".qweight")) continue;
        const auto x = strip(t.name, ".qweight");
        require_dtype(t, {DType::I32}, scheme);
        const auto& z = p.need(x + ".qzeros", t, scheme);
        const auto& s = p.need(x + ".scales", t, scheme);
        if (t.shape.size() != 2) refuse(t, fmt::format("{} qweight is not 2-dimensional", scheme));
        const std::int64_t rows = awq ? t.shape[1] * 8 : t.shape[1];
        const std::int64_t cols = awq ? t.shape[0] : t.shape[0] * 32 / bits;
        if (!awq && (t.shape[0] * 32) % bits)
            refuse(t, fmt::format("gptq qweight of {} rows does not hold whole {}-bit values", t.shape[0],
                                  bits));
        const std::int64_t g = group > 0 ? group : cols;
        const std::int64_t groups = ceil_div(cols, g);
        require_dtype(z, {DType::I32}, scheme);
        require_dtype(s, {DType::F16, DType::BF16, DType::F32}, scheme);
        require_shape(s, {groups, rows}, scheme);
        require_shape(z, {groups, awq ? rows / 8 : ceil_div(rows * bits, 32)}, scheme);
        auto q = std::make_shared<QuantizedWeight>();
        q->scheme = awq ? QuantScheme::awq : QuantScheme::gptq;
        q->rows = rows, q->cols = cols, q->bits = bits, q->block_cols = g;
        q->codes = t, q->scale = s, q->zeros = z, q->zero_minus_one = !awq && v1;
        bool ordered = false;
        if (const auto* gi = p.find(x + ".g_idx"); gi && !awq) {
            require_dtype(*gi, {DType::I32, DType::I64}, scheme);
            require_shape(*gi, {cols}, scheme);
            ordered = check_group_index(*gi, groups, g);
            q->group_index = *gi;
            p.consume(gi->name);
        }
        q->description =
            fmt::format("{} int{} {}{}", scheme, bits, group > 0 ? fmt::format("group {}", g) : "per-channel",
                        ordered || (act_order && q->group_index) ? ", act-order" : "");
        p.consume(z.name), p.consume(s.name);
        p.add(t.name, decoded_matrix(x + ".weight", std::move(q)));
    }
}

void pair_bnb_4bit(Pairing& p) {
    for (const auto& t : p.tensors()) {
        std::string state_name;
        for (const char* kind : {"nf4", "fp4"})
            if (p.find(t.name + ".quant_state.bitsandbytes__" + kind))
                state_name = t.name + ".quant_state.bitsandbytes__" + kind;
        if (state_name.empty()) continue;
        const auto& state = *p.find(state_name);
        const std::string kind = state_name.substr(state_name.size() - 3);
        require_dtype(state, {DType::U8}, "bitsandbytes");
        if (state.nbytes > 65536) refuse(state, "bitsandbytes quant_state holds over 64 KiB");
        const auto js = parse_config_json(state.bytes(), state.path() + ": tensor '" + state.name + "'");
        const auto sh = js.find("shape");
        if (sh == js.end() || !sh->is_array() || sh->size() != 2 || !(*sh)[0].is_number_integer() ||
            !(*sh)[1].is_number_integer())
            refuse(state, "bitsandbytes quant_state has no 2-D shape");
        const std::int64_t rows = (*sh)[0].get<std::int64_t>(), cols = (*sh)[1].get<std::int64_t>();
        const auto blocksize = int_key(js, "blocksize", state.path()).value_or(0);
        if (rows < 1 || cols < 1 || rows > (std::int64_t{1} << 31) || cols > (std::int64_t{1} << 31) ||
            blocksize < 1)
            refuse(state, "bitsandbytes quant_state shape or blocksize out of range");
        const std::int64_t n = rows * cols;
        // bnb_4bit_quant_storage may store the packed bytes as another dtype: they are read as bytes.
        if (t.nbytes != static_cast<std::size_t>(ceil_div(n, 2)))
            refuse(t, fmt::format("bitsandbytes 4-bit weight of {} bytes (expected {} for shape [{}, {}])",
                                  t.nbytes, ceil_div(n, 2), rows, cols));
        const auto& absmax = p.need(t.name + ".absmax", t, "bitsandbytes");
        const auto& map = p.need(t.name + ".quant_map", t, "bitsandbytes");
        require_dtype(map, {DType::F32}, "bitsandbytes");
        require_shape(map, {16}, "bitsandbytes");
        if (absmax.numel() != ceil_div(n, blocksize))
            refuse(absmax, fmt::format("bitsandbytes absmax of {} values (expected {})", absmax.numel(),
                                       ceil_div(n, blocksize)));
        auto q = std::make_shared<QuantizedWeight>();
        q->scheme = QuantScheme::bnb_4bit;
        q->rows = rows, q->cols = cols, q->bits = 4, q->blocksize = blocksize;
        q->codes = t, q->scale = absmax, q->quant_map = map;
        const auto* nested = p.find(t.name + ".nested_absmax");
        if (nested) {
            const auto& nmap = p.need(t.name + ".nested_quant_map", t, "bitsandbytes");
            require_dtype(absmax, {DType::U8}, "bitsandbytes");
            require_dtype(*nested, {DType::F32}, "bitsandbytes");
            require_dtype(nmap, {DType::F32}, "bitsandbytes");
            require_shape(nmap, {256}, "bitsandbytes");
            q->nested_blocksize = int_key(js, "nested_blocksize", state.path()).value_or(0);
            if (q->nested_blocksize < 1 || nested->numel() != ceil_div(absmax.numel(), q->nested_blocksize))
                refuse(*nested, "bitsandbytes nested_absmax does not match nested_blocksize");
            const auto off = js.find("nested_offset");
            if (off == js.end() || !off->is_number())
                refuse(state, "bitsandbytes quant_state has no nested_offset");
            q->nested_offset = off->get<double>();
            q->nested_scale = *nested, q->nested_map = nmap;
            p.consume(nested->name), p.consume(nmap.name);
        } else {
            require_dtype(absmax, {DType::F32}, "bitsandbytes");
        }
        q->description =
            fmt::format("bitsandbytes {}, block {}{}", kind, blocksize, nested ? ", double quant" : "");
        p.consume(absmax.name), p.consume(map.name), p.consume(state.name);
        p.add(t.name, decoded_matrix(t.name, std::move(q)));
    }
}

void pair_bnb_int8(Pairing& p) {
    for (const auto& t : p.tensors()) {
        if (!ends_with(t.name, ".weight") || t.dtype != DType::I8) continue;
        const auto x = strip(t.name, ".weight");
        const auto* scb = p.find(x + ".SCB");
        if (!scb) scb = p.find(t.name + ".SCB");
        if (!scb) continue;
        if (t.shape.size() != 2) refuse(t, "bitsandbytes int8 weight is not 2-dimensional");
        require_dtype(*scb, {DType::F32, DType::F16, DType::BF16}, "bitsandbytes int8");
        require_shape(*scb, {t.shape[0]}, "bitsandbytes int8");
        auto q = std::make_shared<QuantizedWeight>();
        q->scheme = QuantScheme::int8_row;
        q->rows = t.shape[0], q->cols = t.shape[1], q->block_cols = t.shape[1];
        q->codes = t, q->scale = *scb;
        q->description = "bitsandbytes int8 (LLM.int8), per-channel";
        p.consume(scb->name);
        p.add(t.name, decoded_matrix(t.name, std::move(q)));
    }
}

// gpt-oss experts: X_blocks [E, out, in/32, 16] and X_scales [E, out, in/32], one matrix per expert;
// a fused gate_up_proj interleaves gate and up rows (gate even, up odd), split into both.
void pair_mxfp4(Pairing& p) {
    for (const auto& t : p.tensors()) {
        if (!ends_with(t.name, "_blocks")) continue;
        const auto x = strip(t.name, "_blocks");
        const auto& s = p.need(x + "_scales", t, "mxfp4");
        require_dtype(t, {DType::U8}, "mxfp4");
        require_dtype(s, {DType::U8}, "mxfp4");
        if (t.shape.size() != 4 || t.shape[3] != 16)
            refuse(t, fmt::format("mxfp4 blocks of shape {} (expected [experts, out, in/32, 16])",
                                  shape_string(t.shape)));
        const std::int64_t experts = t.shape[0], rows = t.shape[1], groups = t.shape[2], cols = groups * 32;
        require_shape(s, {experts, rows, groups}, "mxfp4");
        const auto dot = x.rfind('.');
        const std::string owner = x.substr(0, dot), proj = x.substr(dot + 1);
        const bool fused = proj == "gate_up_proj";
        if (fused && rows % 2) refuse(t, "mxfp4 gate_up_proj with an odd number of rows");
        for (std::int64_t e = 0; e < experts; ++e) {
            const auto codes = element_slice(t, e * rows * groups * 16, {rows, groups * 16});
            const auto scales = element_slice(s, e * rows * groups, {rows, groups});
            auto one = [&](std::string name, std::int64_t first_row, std::int64_t step) {
                auto q = std::make_shared<QuantizedWeight>();
                q->scheme = QuantScheme::mxfp4;
                q->rows = step == 1 ? rows : rows / 2, q->cols = cols, q->block_cols = 32;
                q->codes = codes, q->scale = scales;
                q->row_first = first_row, q->row_step = step;
                q->description = "mxfp4, group 32";
                p.add(t.name, decoded_matrix(fmt::format("{}.{}.{}.weight", owner, e, name), std::move(q)));
            };
            if (fused) {
                one("gate_proj", 0, 2);
                one("up_proj", 1, 2);
            } else {
                one(proj, 0, 1);
            }
        }
        p.consume(s.name);
    }
}

void drop_ignored(Pairing& p) {
    for (const auto& t : p.tensors())
        if (model::is_quantization_side_tensor(t.name)) p.consume(t.name);
}

// The config's quantization section: quantization_config, or compressed-tensors' compression_config.
const Json* quantization_section(const Json& config) {
    if (!config.is_object()) return nullptr;
    for (const char* key : {"quantization_config", "compression_config"})
        if (auto it = config.find(key); it != config.end() && it->is_object()) return &*it;
    return nullptr;
}

// compressed-tensors: the weights' scheme of the first config group (one group is what the releases
// use; each weight's own scale shape decides its granularity). Returns the scheme's description.
std::string pair_compressed_tensors(Checkpoint& ck, Pairing& p, const Json& qc, const std::string& label) {
    std::string format = string_key(qc, "format");
    Json weights = Json::object();
    if (auto g = qc.find("config_groups"); g != qc.end() && g->is_object())
        for (const auto& [name, group] : g->items()) {
            if (group.is_object() && group.contains("weights") && group["weights"].is_object()) {
                weights = group["weights"];
                if (format.empty()) format = string_key(group, "format");
                break;
            }
        }
    const int bits = static_cast<int>(int_key(weights, "num_bits", label).value_or(8));
    const auto group = int_key(weights, "group_size", label);
    const auto block = block_key(weights, "block_structure", label);
    if (format == "float-quantized" || format == "int-quantized" || format == "naive-quantized") {
        pair_fp8(p, block, group, true);
    } else if (format == "pack-quantized") {
        pair_packed_int(p, bits, group, label);
    } else if (format == "nvfp4-pack-quantized") {
        pair_nvfp4(p);
    } else if (format != "dense") {
        ck.undecoded_quantization = fmt::format("compressed-tensors format '{}' is not decoded", format);
    }
    return fmt::format("compressed-tensors {}", format);
}

// GPTQ (bits 2, 3, 4, 8; checkpoint_format gptq or gptq_v2) and AWQ (gemm, 4 bits); any other recipe is
// left undecoded with the reason. Returns the scheme's description.
std::string pair_gptq_or_awq(Checkpoint& ck, Pairing& p, const Json& qc, bool awq, const std::string& label) {
    const int bits = static_cast<int>(
        int_key(qc, awq ? "w_bit" : "bits", label).value_or(int_key(qc, "bits", label).value_or(4)));
    const auto group = int_key(qc, awq ? "q_group_size" : "group_size", label)
                           .value_or(int_key(qc, "group_size", label).value_or(128));
    const std::string version = string_key(qc, "version"), format = string_key(qc, "checkpoint_format");
    if (awq && !version.empty() && version != "gemm" && version != "GEMM")
        ck.undecoded_quantization = fmt::format("awq version '{}' is not decoded (expected gemm)", version);
    else if (awq && bits != 4)
        ck.undecoded_quantization = fmt::format("awq with {} bits is not decoded (expected 4)", bits);
    else if (!awq && bits != 2 && bits != 3 && bits != 4 && bits != 8)
        ck.undecoded_quantization =
            fmt::format("gptq with {} bits is not decoded (expected 2, 3, 4 or 8)", bits);
    else if (!awq && !format.empty() && format != "gptq" && format != "gptq_v2")
        ck.undecoded_quantization = fmt::format("gptq checkpoint_format '{}' is not decoded", format);
    else {
        const auto desc = qc.find("desc_act");
        pair_gptq_awq(p, awq, bits, group, format != "gptq_v2",
                      desc != qc.end() && desc->is_boolean() && desc->get<bool>());
    }
    return awq ? "awq" : fmt::format("gptq ({})", format.empty() ? "gptq" : format);
}

// The weights of the config's quant_method paired with their scales (an unknown method is left
// undecoded with the reason). Returns the scheme's description.
std::string pair_by_method(Checkpoint& ck, Pairing& p, const Json& qc, const std::string& label) {
    const std::string method = string_key(qc, "quant_method");
    if (method == "fp8" || method == "fbgemm_fp8") {
        pair_fp8(p, block_key(qc, "weight_block_size", label), std::nullopt, false);
        return method == "fp8" ? "fp8 (transformers fine-grained)" : "fp8 (fbgemm)";
    }
    if (method == "compressed-tensors") return pair_compressed_tensors(ck, p, qc, label);
    if (method == "gptq" || method == "awq") return pair_gptq_or_awq(ck, p, qc, method == "awq", label);
    if (method == "bitsandbytes") {
        pair_bnb_4bit(p);
        pair_bnb_int8(p);
        return "bitsandbytes";
    }
    if (method == "mxfp4") {
        pair_mxfp4(p);
        return "mxfp4";
    }
    ck.undecoded_quantization = fmt::format(
        "quantization_config.quant_method '{}' is not decoded (decoded: fp8, "
        "fbgemm_fp8, compressed-tensors, gptq, awq, bitsandbytes, mxfp4)",
        method.empty() ? "(none)" : method);
    return method.empty() ? "unknown" : method;
}

}  // namespace

// The stages: the config's quantization section, the weights paired with their scales by its method
// (without one, FP8 weights beside scales are paired by name; other schemes' tensors are refused when
// analysed, their codes being integers without a recipe), the side tensors dropped, the scheme named.
void read_quantized_weights(Checkpoint& ck, const std::string& label) {
    if (ck.format != CheckpointFormat::safetensors && ck.format != CheckpointFormat::pytorch) return;
    const Json* qc = quantization_section(ck.config);
    Pairing p(ck);
    std::string scheme;
    if (qc)
        scheme = pair_by_method(ck, p, *qc, label);
    else
        pair_fp8(p, std::nullopt, std::nullopt, false);
    if (qc || ck.undecoded_quantization.size()) drop_ignored(p);
    p.apply();
    bool any = false;
    for (const auto& t : ck.tensors) any = any || t.quant;
    if (qc)
        ck.quantization = scheme;
    else if (any)
        ck.quantization = "fp8 (scales paired by name)";
}

}  // namespace diffract::formats
