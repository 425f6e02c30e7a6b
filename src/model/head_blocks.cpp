// How an attention projection splits into heads, by the geometry of its component.
#include <set>

#include <fmt/format.h>

#include "diffract/core/error.hpp"
#include "diffract/model/schema.hpp"

namespace diffract::model {
namespace {

// The geometry and fused-qkv layout that hold for a tensor: its component's. Towers store [q; k; v].
struct Layout {
    const HeadGeometry* heads = nullptr;
    QkvLayout qkv = QkvLayout::concatenated;
    bool transposed = false;
};

Layout layout_of(const ModelSchema& schema, const TensorInfo& t) {
    const auto c = classify_tensor(t.name).component;
    if (c == Component::language) return {schema.heads_of(c), schema.qkv_layout, schema.conv1d_transposed};
    return {schema.heads_of(c), QkvLayout::concatenated, false};
}

[[noreturn]] void mismatch(const TensorInfo& t, std::int64_t expected, std::int64_t found, const char* what) {
    throw_input_error(t.path(), t.name,
                      fmt::format("head geometry does not divide the projection: {} (expected {}, found {})",
                                  what, expected, found));
}

}  // namespace

MatrixBlock whole_matrix(const ModelSchema& schema, const TensorInfo& t) {
    MatrixBlock b;
    b.rows = t.shape.size() >= 1 ? t.shape[0] : 1;
    b.cols = 1;
    for (std::size_t i = 1; i < t.shape.size(); ++i) b.cols *= t.shape[i];
    // Conv1D weights are [in, out]; embeddings and 1-D tensors are not Conv1D, nor are the towers'.
    const auto r = classify_tensor(t.name);
    b.transposed = schema.conv1d_transposed && r.component == Component::language && t.shape.size() == 2 &&
                   r.role != Role::embed && r.role != Role::lm_head;
    return b;
}

std::vector<HeadBlock> head_blocks(const ModelSchema& schema, const TensorInfo& t, Role role) {
    std::vector<HeadBlock> out;
    const Layout layout = layout_of(schema, t);
    if (!layout.heads || t.shape.size() != 2 || !role_is_attention(role)) return out;
    const HeadGeometry& g = *layout.heads;
    const std::int64_t d = g.head_dim, dv = g.value_dim();
    const MatrixBlock whole = whole_matrix(schema, t);
    // Logical (out × in) extent: rows are output features.
    const std::int64_t out_dim = whole.transposed ? whole.cols : whole.rows;
    const std::int64_t in_dim = whole.transposed ? whole.rows : whole.cols;
    // Block over logical output rows [r0, r0+n) of the whole matrix, in stored coordinates.
    auto out_rows = [&](std::int64_t r0, std::int64_t n) {
        MatrixBlock b;
        b.transposed = whole.transposed;
        if (whole.transposed)
            b.row0 = 0, b.rows = whole.rows, b.col0 = r0, b.cols = n;
        else
            b.row0 = r0, b.rows = n, b.col0 = 0, b.cols = whole.cols;
        return b;
    };
    auto add_rows = [&](Role proj, int n, std::int64_t base, std::int64_t stride, std::int64_t width) {
        for (int h = 0; h < n; ++h) out.push_back({h, proj, out_rows(base + h * stride, width)});
    };
    const std::int64_t q_rows = g.n_heads * d, kv_rows = g.n_kv_heads * d;
    // The model width, when the config gives it: the projections' input (Q, K, V) or output (O) side.
    // A latent query or key/value projection reads the low-rank latent, not the model width.
    const bool reads_latent = g.latent && (role == Role::attn_q || role == Role::attn_kv_b);
    if (g.hidden > 0 && !reads_latent && role != Role::attn_kv_b) {
        const bool o = role == Role::attn_o;
        const std::int64_t side = o ? out_dim : in_dim;
        if (side != g.hidden)
            mismatch(t, g.hidden, side,
                     o ? "output-projection rows = hidden_size" : "projection columns = hidden_size");
    }
    switch (role) {
        case Role::attn_q:
            if (out_dim != q_rows)
                mismatch(t, q_rows, out_dim, "query rows = num_attention_heads x head_dim");
            add_rows(Role::attn_q, g.n_heads, 0, d, d);
            break;
        case Role::attn_k:
        case Role::attn_v:
            if (g.latent) break;  // a latent model's keys and values are kv_b_proj's
            if (out_dim != kv_rows)
                mismatch(t, kv_rows, out_dim, "key/value rows = num_key_value_heads x head_dim");
            add_rows(role, g.n_kv_heads, 0, d, d);
            break;
        case Role::attn_kv_b: {
            // Head h's rows: its key's non-rotary part (qk_nope_head_dim), then its value (v_head_dim).
            if (!g.latent) break;
            const std::int64_t nope = g.key_nope_dim(), stride = nope + dv;
            if (out_dim != g.n_heads * stride)
                mismatch(t, g.n_heads * stride, out_dim,
                         "kv_b_proj rows = num_attention_heads x (qk_nope_head_dim + v_head_dim)");
            add_rows(Role::attn_k, g.n_heads, 0, stride, nope);
            add_rows(Role::attn_v, g.n_heads, nope, stride, dv);
            break;
        }
        case Role::attn_o: {
            if (in_dim != g.n_heads * dv)
                mismatch(t, g.n_heads * dv, in_dim,
                         g.latent ? "output-projection columns = num_attention_heads x v_head_dim"
                                  : "output-projection columns = num_attention_heads x head_dim");
            for (int h = 0; h < g.n_heads; ++h) {
                MatrixBlock b;
                b.transposed = whole.transposed;
                if (whole.transposed)
                    b.row0 = h * dv, b.rows = dv, b.col0 = 0, b.cols = whole.cols;
                else
                    b.row0 = 0, b.rows = whole.rows, b.col0 = h * dv, b.cols = dv;
                out.push_back({h, Role::attn_o, b});
            }
            break;
        }
        case Role::attn_qkv:
            if (out_dim != q_rows + 2 * kv_rows)
                mismatch(t, q_rows + 2 * kv_rows, out_dim,
                         "fused qkv rows = (heads + 2 x kv heads) x head_dim");
            switch (layout.qkv) {
                case QkvLayout::interleaved_per_head:
                    if (g.n_kv_heads != g.n_heads)
                        mismatch(t, g.n_heads, g.n_kv_heads, "interleaved qkv needs kv heads == heads");
                    add_rows(Role::attn_q, g.n_heads, 0, 3 * d, d);
                    add_rows(Role::attn_k, g.n_heads, d, 3 * d, d);
                    add_rows(Role::attn_v, g.n_heads, 2 * d, 3 * d, d);
                    break;
                case QkvLayout::grouped_by_kv: {
                    // Group k: its query heads, then its key, then its value.
                    const int group = g.group_size();
                    const std::int64_t stride = (group + 2) * d;
                    for (int k = 0; k < g.n_kv_heads; ++k) {
                        for (int j = 0; j < group; ++j)
                            out.push_back({k * group + j, Role::attn_q, out_rows(k * stride + j * d, d)});
                        out.push_back({k, Role::attn_k, out_rows(k * stride + group * d, d)});
                        out.push_back({k, Role::attn_v, out_rows(k * stride + (group + 1) * d, d)});
                    }
                    break;
                }
                default:
                    add_rows(Role::attn_q, g.n_heads, 0, d, d);
                    add_rows(Role::attn_k, g.n_kv_heads, q_rows, d, d);
                    add_rows(Role::attn_v, g.n_kv_heads, q_rows + kv_rows, d, d);
                    break;
            }
            break;
        default:
            break;
    }
    return out;
}

void check_head_geometry(ModelSchema& schema, const std::vector<TensorInfo>& tensors) {
    auto lenient = [&](Component c) { return c != Component::language || !schema.geometry_verified; };
    std::set<Component> dropped;
    for (const auto& t : tensors) {
        const auto r = classify_tensor(t.name);
        if (!lenient(r.component) || dropped.count(r.component) || !schema.heads_of(r.component)) continue;
        try {
            (void)head_blocks(schema, t, r.role);
        } catch (const InputError& e) {
            schema.warnings.push_back(
                fmt::format("{} heads are not split: {}", component_name(r.component), e.what()));
            dropped.insert(r.component);
        }
    }
    for (const auto c : dropped) {
        if (c == Component::language)
            schema.heads.reset();
        else
            schema.towers[c].heads.reset();
    }
}

}  // namespace diffract::model
