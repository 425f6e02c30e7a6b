#include "diffract/synth/synthetic_family.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diffract/core/atomic_file.hpp"
#include "diffract/core/error.hpp"
#include "diffract/core/matrix.hpp"
#include "diffract/core/random.hpp"
#include "diffract/formats/checkpoint_writer.hpp"

namespace fs = std::filesystem;

namespace diffract::synth {
namespace {

constexpr int kHouseholders = 4;  // reflections applied on the large side of a rotated block

struct Plan {
    // per layer: generic heads, and per domain index its heads
    std::vector<std::vector<int>> generic;
    std::vector<std::vector<std::vector<int>>> domain;  // [domain][layer] -> heads
};

Plan plan_heads(const FamilyOptions& o) {
    Plan p;
    p.domain.assign(o.domains.size(), std::vector<std::vector<int>>(static_cast<std::size_t>(o.layers)));
    for (int l = 0; l < o.layers; ++l) {
        std::vector<int> perm(static_cast<std::size_t>(o.heads));
        for (int h = 0; h < o.heads; ++h) perm[static_cast<std::size_t>(h)] = h;
        std::uint64_t state = stream_seed(o.seed, "heads", std::to_string(l));
        shuffle(std::span<int>(perm), state);
        std::size_t next = 0;
        std::vector<int> g(perm.begin(), perm.begin() + o.generic_heads_per_layer);
        std::sort(g.begin(), g.end());
        p.generic.push_back(g);
        next = static_cast<std::size_t>(o.generic_heads_per_layer);
        for (std::size_t d = 0; d < o.domains.size(); ++d) {
            std::vector<int> hs(perm.begin() + static_cast<long>(next),
                                perm.begin() + static_cast<long>(next) + o.domain_heads_per_layer);
            std::sort(hs.begin(), hs.end());
            p.domain[d][static_cast<std::size_t>(l)] = hs;
            next += static_cast<std::size_t>(o.domain_heads_per_layer);
        }
    }
    return p;
}

struct Block {
    std::int64_t r0, nr, c0, nc;
};

double block_norm(const std::vector<float>& w, std::int64_t cols, const Block& b) {
    double s = 0;
    for (std::int64_t i = 0; i < b.nr; ++i)
        for (std::int64_t j = 0; j < b.nc; ++j) {
            const double v = w[static_cast<std::size_t>((b.r0 + i) * cols + b.c0 + j)];
            s += v * v;
        }
    return std::sqrt(s);
}

void add_gaussian(std::vector<float>& w, std::int64_t cols, const Block& b, double target_norm, Rng& rng) {
    std::vector<double> e(static_cast<std::size_t>(b.nr * b.nc));
    double s = 0;
    for (auto& v : e) v = rng.normal(), s += v * v;
    const double k = s > 0 ? target_norm / std::sqrt(s) : 0;
    for (std::int64_t i = 0; i < b.nr; ++i)
        for (std::int64_t j = 0; j < b.nc; ++j)
            w[static_cast<std::size_t>((b.r0 + i) * cols + b.c0 + j)] +=
                static_cast<float>(k * e[static_cast<std::size_t>(i * b.nc + j)]);
}

// A random d×d orthogonal matrix (modified Gram-Schmidt of a Gaussian matrix), row-major.
std::vector<double> random_orthogonal(std::int64_t d, Rng& rng) {
    std::vector<double> q(static_cast<std::size_t>(d * d));
    for (auto& v : q) v = rng.normal();
    for (std::int64_t i = 0; i < d; ++i) {
        double* qi = &q[static_cast<std::size_t>(i * d)];
        for (std::int64_t j = 0; j < i; ++j) {
            const double* qj = &q[static_cast<std::size_t>(j * d)];
            double dot = 0;
            for (std::int64_t k = 0; k < d; ++k) dot += qi[k] * qj[k];
            for (std::int64_t k = 0; k < d; ++k) qi[k] -= dot * qj[k];
        }
        double n = 0;
        for (std::int64_t k = 0; k < d; ++k) n += qi[k] * qi[k];
        n = std::sqrt(n);
        for (std::int64_t k = 0; k < d; ++k) qi[k] /= n;
    }
    return q;
}

std::vector<double> unit_vector(std::int64_t n, Rng& rng) {
    std::vector<double> v(static_cast<std::size_t>(n));
    double s = 0;
    for (auto& x : v) x = rng.normal(), s += x * x;
    for (auto& x : v) x /= std::sqrt(s);
    return v;
}

// B <- L B R with L, R orthogonal: random orthogonal on the block's small side, a product of
// Householder reflections on its large side. Singular values are unchanged; vectors rotate.
void rotate_block(std::vector<float>& w, std::int64_t cols, const Block& b, Rng& rng) {
    Matrix<double> m(b.nr, b.nc);
    for (std::int64_t i = 0; i < b.nr; ++i)
        for (std::int64_t j = 0; j < b.nc; ++j)
            m(i, j) = w[static_cast<std::size_t>((b.r0 + i) * cols + b.c0 + j)];
    const bool rows_small = b.nr <= b.nc;
    const std::int64_t small = rows_small ? b.nr : b.nc;
    const auto q = random_orthogonal(small, rng);
    Matrix<double> out(b.nr, b.nc);
    if (rows_small) {  // out = Q m
        for (std::int64_t i = 0; i < b.nr; ++i)
            for (std::int64_t k = 0; k < b.nr; ++k) {
                const double qik = q[static_cast<std::size_t>(i * small + k)];
                for (std::int64_t j = 0; j < b.nc; ++j) out(i, j) += qik * m(k, j);
            }
    } else {  // out = m Qᵀ
        for (std::int64_t i = 0; i < b.nr; ++i)
            for (std::int64_t j = 0; j < b.nc; ++j) {
                double s = 0;
                for (std::int64_t k = 0; k < b.nc; ++k)
                    s += m(i, k) * q[static_cast<std::size_t>(j * small + k)];
                out(i, j) = s;
            }
    }
    for (int r = 0; r < kHouseholders; ++r) {
        if (rows_small) {  // out <- out (I - 2 v vᵀ), v over columns
            const auto v = unit_vector(b.nc, rng);
            for (std::int64_t i = 0; i < b.nr; ++i) {
                double dot = 0;
                for (std::int64_t j = 0; j < b.nc; ++j) dot += out(i, j) * v[static_cast<std::size_t>(j)];
                for (std::int64_t j = 0; j < b.nc; ++j) out(i, j) -= 2 * dot * v[static_cast<std::size_t>(j)];
            }
        } else {  // out <- (I - 2 v vᵀ) out, v over rows
            const auto v = unit_vector(b.nr, rng);
            for (std::int64_t j = 0; j < b.nc; ++j) {
                double dot = 0;
                for (std::int64_t i = 0; i < b.nr; ++i) dot += out(i, j) * v[static_cast<std::size_t>(i)];
                for (std::int64_t i = 0; i < b.nr; ++i) out(i, j) -= 2 * dot * v[static_cast<std::size_t>(i)];
            }
        }
    }
    for (std::int64_t i = 0; i < b.nr; ++i)
        for (std::int64_t j = 0; j < b.nc; ++j)
            w[static_cast<std::size_t>((b.r0 + i) * cols + b.c0 + j)] = static_cast<float>(out(i, j));
}

struct TensorDef {
    formats::TensorSpec spec;
    int layer = -1;
    char proj =
        0;  // 'q','k','v','o' for attention projections, 'm' for MLP, 'n' for norms, 'e' other matrices
};

std::vector<TensorDef> tensor_defs(const FamilyOptions& o) {
    const std::int64_t d = o.hidden / o.heads;
    const std::int64_t H = o.hidden, I = o.intermediate;
    std::vector<TensorDef> t;
    auto add = [&](std::string name, std::vector<std::int64_t> shape, int layer, char proj) {
        t.push_back({{std::move(name), o.dtype, std::move(shape)}, layer, proj});
    };
    add("model.embed_tokens.weight", {o.vocab, H}, -1, 'e');
    for (int l = 0; l < o.layers; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        add(p + "self_attn.q_proj.weight", {o.heads * d, H}, l, 'q');
        add(p + "self_attn.k_proj.weight", {o.kv_heads * d, H}, l, 'k');
        add(p + "self_attn.v_proj.weight", {o.kv_heads * d, H}, l, 'v');
        add(p + "self_attn.o_proj.weight", {H, o.heads * d}, l, 'o');
        add(p + "self_attn.q_norm.weight", {o.heads * d}, l, 'n');
        add(p + "self_attn.k_norm.weight", {o.kv_heads * d}, l, 'n');
        add(p + "post_attention_layernorm.weight", {H}, l, 'n');
        add(p + "mlp.gate_proj.weight", {I, H}, l, 'm');
        add(p + "mlp.up_proj.weight", {I, H}, l, 'm');
        add(p + "mlp.down_proj.weight", {H, I}, l, 'm');
        add(p + "post_feedforward_layernorm.weight", {H}, l, 'n');
    }
    add("model.norm.weight", {H}, -1, 'n');
    add("lm_head.weight", {o.vocab, H}, -1, 'e');
    return t;
}

std::vector<float> base_tensor(const FamilyOptions& o, const TensorDef& def) {
    const auto& shape = def.spec.shape;
    const std::int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
    std::vector<float> w(static_cast<std::size_t>(rows * cols));
    Rng rng(stream_seed(o.seed, "base", def.spec.name));
    if (def.proj == 'n') {
        for (auto& v : w) v = static_cast<float>(1.0 + 0.05 * rng.normal());
        return w;
    }
    const double sd = 1.0 / std::sqrt(static_cast<double>(cols));
    for (auto& v : w) v = static_cast<float>(sd * rng.normal());
    if (def.proj == 'm') {
        // Planted outliers well above the Marchenko-Pastur edge sd (sqrt(rows) + sqrt(cols)).
        const double edge =
            sd * (std::sqrt(static_cast<double>(rows)) + std::sqrt(static_cast<double>(cols)));
        for (int s = 0; s < o.spikes; ++s) {
            const auto u = unit_vector(rows, rng);
            const auto v = unit_vector(cols, rng);
            const double strength = (3.0 + s) * edge;
            for (std::int64_t i = 0; i < rows; ++i)
                for (std::int64_t j = 0; j < cols; ++j)
                    w[static_cast<std::size_t>(i * cols + j)] += static_cast<float>(
                        strength * u[static_cast<std::size_t>(i)] * v[static_cast<std::size_t>(j)]);
        }
    }
    return w;
}

// The blocks of head h in tensor `def` (rows of Q/K/V, columns of O); K/V use the head's kv group.
Block head_block(const FamilyOptions& o, const TensorDef& def, int h) {
    const std::int64_t d = o.hidden / o.heads;
    const int group = o.heads / o.kv_heads;
    switch (def.proj) {
        case 'q':
            return {h * d, d, 0, o.hidden};
        case 'k':
        case 'v':
            return {(h / group) * d, d, 0, o.hidden};
        default:
            return {0, o.hidden, h * d, d};  // 'o'
    }
}

void apply_cpt(const FamilyOptions& o, const Plan& plan, int model_index, const std::string& model_name,
               const TensorDef& def, std::vector<float>& w) {
    const auto& shape = def.spec.shape;
    const std::int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
    const bool attention = def.proj == 'q' || def.proj == 'k' || def.proj == 'v' || def.proj == 'o';
    if (attention) {
        const auto l = static_cast<std::size_t>(def.layer);
        // Generic drift: the same update in every CPT model (seed independent of the model).
        std::set<std::int64_t> done;  // GQA: a shared K/V block gets the drift once
        for (int h : plan.generic[l]) {
            const Block b = head_block(o, def, h);
            if (!done.insert(b.r0 * cols + b.c0).second) continue;
            Rng rng(stream_seed(o.seed, "generic:" + def.spec.name, std::to_string(b.r0 * cols + b.c0)));
            add_gaussian(w, cols, b, o.generic_scale * block_norm(w, cols, b), rng);
        }
        // Domain heads: a spectrum-preserving rotation (reference model: none). With GQA only Q and O
        // rotate, since K/V blocks are shared with heads of other roles.
        const bool rotates_kv = o.kv_heads == o.heads;
        if (model_index >= 0 && (def.proj == 'q' || def.proj == 'o' || rotates_kv)) {
            for (int h : plan.domain[static_cast<std::size_t>(model_index)][l]) {
                Rng rng(stream_seed(o.seed, "rotate:" + model_name + ":" + def.spec.name, std::to_string(h)));
                rotate_block(w, cols, head_block(o, def, h), rng);
            }
        }
    }
    // Every matrix of every CPT model: its own small noise.
    Rng rng(stream_seed(o.seed, "noise:" + model_name, def.spec.name));
    const Block whole{0, rows, 0, cols};
    add_gaussian(w, cols, whole, o.noise * block_norm(w, cols, whole), rng);
}

nlohmann::json olmo2_config(const FamilyOptions& o) {
    return {{"architectures", {"Olmo2ForCausalLM"}},
            {"model_type", "olmo2"},
            {"hidden_size", o.hidden},
            {"intermediate_size", o.intermediate},
            {"num_attention_heads", o.heads},
            {"num_key_value_heads", o.kv_heads},
            {"num_hidden_layers", o.layers},
            {"vocab_size", o.vocab},
            {"max_position_embeddings", 4096},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 500000.0},
            {"attention_bias", false},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", false},
            {"torch_dtype",
             o.dtype == DType::BF16 ? "bfloat16" : (o.dtype == DType::F16 ? "float16" : "float32")}};
}

nlohmann::json pairs(const std::vector<std::vector<int>>& per_layer) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t l = 0; l < per_layer.size(); ++l)
        for (int h : per_layer[l]) out.push_back({static_cast<int>(l), h});
    return out;
}

}  // namespace

std::uint64_t family_shard_bytes(double shard_mb) {
    // 2^53 MB is far beyond any disk; below it the product is exact enough and fits 64 bits.
    if (!std::isfinite(shard_mb) || shard_mb < 0 || shard_mb > 9e15)
        throw InputError(fmt::format(
            "--shard-mb: expected a size in MB >= 0 (0: one file per model), found {}", shard_mb));
    return static_cast<std::uint64_t>(shard_mb * 1e6);
}

void generate_family(const std::string& out_dir, const FamilyOptions& options) {
    FamilyOptions o = options;
    // Each size named by its flag: a negative or zero size is bad input, not an internal failure.
    for (const auto& [flag, value, least] : {std::tuple<const char*, int, int>{"--layers", o.layers, 1},
                                             {"--hidden", o.hidden, 1},
                                             {"--heads", o.heads, 1},
                                             {"--kv-heads", o.kv_heads, 0},
                                             {"--intermediate", o.intermediate, 1},
                                             {"--vocab", o.vocab, 1},
                                             {"--domain-heads", o.domain_heads_per_layer, 0},
                                             {"--generic-heads", o.generic_heads_per_layer, 0}})
        if (value < least)
            throw InputError(fmt::format(
                "{}: expected a number >= {}{}, found {}", flag, least,
                least == 0 && std::string_view(flag) == "--kv-heads" ? " (0: as many as --heads)" : "",
                value));
    if (o.kv_heads == 0) o.kv_heads = o.heads;
    if (o.heads <= 0 || o.kv_heads <= 0 || o.hidden % o.heads != 0 || o.heads % o.kv_heads != 0)
        throw InputError(fmt::format("synthetic family: hidden {} / heads {} / kv heads {} do not divide",
                                     o.hidden, o.heads, o.kv_heads));
    if (o.generic_heads_per_layer + o.domain_heads_per_layer * static_cast<int>(o.domains.size()) > o.heads)
        throw InputError("synthetic family: more planted heads per layer than heads");
    const Plan plan = plan_heads(o);
    const auto defs = tensor_defs(o);
    std::vector<formats::TensorSpec> specs;
    for (const auto& d : defs) specs.push_back(d.spec);

    formats::write_directory_atomically(out_dir, {}, [&](const std::string& tmp) {
        std::vector<std::pair<std::string, int>> models{{"pretrained", -2}};
        for (std::size_t i = 0; i < o.domains.size(); ++i)
            models.emplace_back(o.domains[i], static_cast<int>(i));
        models.emplace_back(o.reference, -1);
        for (const auto& [name, index] : models) {
            if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), name) == o.only.end()) continue;
            formats::WriteOptions wo;
            wo.config = olmo2_config(o);
            wo.extra_files["generation_config.json"] =
                R"({"_from_model_config": true, "bos_token_id": 0, "eos_token_id": 1})";
            if (o.max_shard_bytes > 0) wo.max_shard_bytes = o.max_shard_bytes;
            formats::write_checkpoint((fs::path(tmp) / name).string(), specs,
                                      [&, model_name = name, model_index = index](
                                          const formats::TensorSpec& spec, std::span<std::byte> out) {
                                          const auto& def = *std::find_if(
                                              defs.begin(), defs.end(),
                                              [&](const TensorDef& d) { return d.spec.name == spec.name; });
                                          auto w = base_tensor(o, def);
                                          if (model_index != -2)
                                              apply_cpt(o, plan, model_index, model_name, def, w);
                                          convert_from_f32(w.data(), spec.dtype, w.size(), out.data());
                                      },
                                      wo);
        }
        nlohmann::json planted = {{"layers", o.layers},
                                  {"heads", o.heads},
                                  {"kv_heads", o.kv_heads},
                                  {"hidden", o.hidden},
                                  {"head_dim", o.hidden / o.heads},
                                  {"pretrained", "pretrained"},
                                  {"domains", o.domains},
                                  {"reference", o.reference},
                                  {"generic_heads", pairs(plan.generic)},
                                  {"generic_scale", o.generic_scale},
                                  {"noise", o.noise},
                                  {"mlp_spikes", o.spikes},
                                  {"seed", o.seed},
                                  {"rotated_blocks", o.kv_heads == o.heads ? "q,k,v,o" : "q,o"}};
        for (std::size_t i = 0; i < o.domains.size(); ++i)
            planted["domain_heads"][o.domains[i]] = pairs(plan.domain[i]);
        write_file_fully((fs::path(tmp) / "planted.json").string(), planted.dump(2) + "\n");
    });
}

void apply_preset(FamilyOptions& o, const std::string& preset, const std::set<std::string>& given) {
    if (preset.empty() || preset == "tiny") return;
    struct Shape {
        int layers, hidden, heads, kv_heads, intermediate, vocab;
    };
    Shape p{};
    if (preset == "1b")  // OLMo-2 1B shapes
        p = {16, 2048, 16, 16, 8192, 100352};
    else if (preset == "7b")  // OLMo-2 7B shapes
        p = {32, 4096, 32, 32, 11008, 100352};
    else
        throw InputError(fmt::format("--preset: unknown preset '{}' (expected tiny, 1b or 7b)", preset));
    auto set = [&](const char* name, int& field, int value) {
        if (!given.count(name)) field = value;
    };
    set("layers", o.layers, p.layers), set("hidden", o.hidden, p.hidden), set("heads", o.heads, p.heads);
    // heads without kv_heads keeps full attention (0: as many key/value heads as heads).
    set("kv_heads", o.kv_heads, given.count("heads") ? 0 : p.kv_heads);
    set("intermediate", o.intermediate, p.intermediate), set("vocab", o.vocab, p.vocab);
}

DType parse_family_dtype(const std::string& text) {
    const auto dt = dtype_from_name(text);
    if (!dt || (*dt != DType::BF16 && *dt != DType::F16 && *dt != DType::F32))
        throw InputError(fmt::format("--dtype: expected BF16, F16 or F32, found '{}'", text));
    return *dt;
}

}  // namespace diffract::synth
