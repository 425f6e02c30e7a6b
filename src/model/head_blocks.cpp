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

namespace {

// One attention projection split into heads: its logical (out × in) extent, and blocks of its output
// rows (or, for the output projection, input columns) in stored coordinates.
struct Splitter {
    const TensorInfo& t;
    const HeadGeometry& g;
    MatrixBlock whole;
    std::int64_t out_dim, in_dim;
    std::vector<HeadBlock> out;

    Splitter(const TensorInfo& tensor, const HeadGeometry& geometry, MatrixBlock w)
        : t(tensor),
          g(geometry),
          whole(w),
          out_dim(w.transposed ? w.cols : w.rows),
          in_dim(w.transposed ? w.rows : w.cols) {}

    // Logical output rows [r0, r0 + n).
    MatrixBlock out_rows(std::int64_t r0, std::int64_t n) const {
        MatrixBlock b;
        b.transposed = whole.transposed;
        if (whole.transposed)
            b.row0 = 0, b.rows = whole.rows, b.col0 = r0, b.cols = n;
        else
            b.row0 = r0, b.rows = n, b.col0 = 0, b.cols = whole.cols;
        return b;
    }
    // Logical input columns [c0, c0 + n).
    MatrixBlock in_cols(std::int64_t c0, std::int64_t n) const {
        MatrixBlock b;
        b.transposed = whole.transposed;
        if (whole.transposed)
            b.row0 = c0, b.rows = n, b.col0 = 0, b.cols = whole.cols;
        else
            b.row0 = 0, b.rows = whole.rows, b.col0 = c0, b.cols = n;
        return b;
    }
    void add_rows(Role proj, int n, std::int64_t base, std::int64_t stride, std::int64_t width) {
        for (int h = 0; h < n; ++h) out.push_back({h, proj, out_rows(base + h * stride, width)});
    }
    void expect(std::int64_t expected, std::int64_t found, const char* what) const {
        if (expected != found) mismatch(t, expected, found, what);
    }

    // The model width, when the config gives it: the projections' input (Q, K, V) or output (O) side.
    // A latent query or key/value projection reads the low-rank latent, not the model width.
    void check_width(Role role) const {
        const bool reads_latent = g.latent && role == Role::attn_q;
        if (g.hidden <= 0 || reads_latent || role == Role::attn_kv_b) return;
        const bool o = role == Role::attn_o;
        expect(g.hidden, o ? out_dim : in_dim,
               o ? "output-projection rows = hidden_size" : "projection columns = hidden_size");
    }
    void query() {
        expect(g.n_heads * g.head_dim, out_dim, "query rows = num_attention_heads x head_dim");
        add_rows(Role::attn_q, g.n_heads, 0, g.head_dim, g.head_dim);
    }
    void key_or_value(Role role) {
        if (g.latent) return;  // a latent model's keys and values are kv_b_proj's
        expect(g.n_kv_heads * g.head_dim, out_dim, "key/value rows = num_key_value_heads x head_dim");
        add_rows(role, g.n_kv_heads, 0, g.head_dim, g.head_dim);
    }
    // Head h's rows of kv_b_proj: its key's non-rotary part (qk_nope_head_dim), then its value.
    void latent_key_value() {
        if (!g.latent) return;
        const std::int64_t nope = g.key_nope_dim(), stride = nope + g.value_dim();
        expect(g.n_heads * stride, out_dim,
               "kv_b_proj rows = num_attention_heads x (qk_nope_head_dim + v_head_dim)");
        add_rows(Role::attn_k, g.n_heads, 0, stride, nope);
        add_rows(Role::attn_v, g.n_heads, nope, stride, g.value_dim());
    }
    void output() {
        const std::int64_t dv = g.value_dim();
        expect(g.n_heads * dv, in_dim,
               g.latent ? "output-projection columns = num_attention_heads x v_head_dim"
                        : "output-projection columns = num_attention_heads x head_dim");
        for (int h = 0; h < g.n_heads; ++h) out.push_back({h, Role::attn_o, in_cols(h * dv, dv)});
    }
    void fused(QkvLayout layout) {
        const std::int64_t d = g.head_dim, q_rows = g.n_heads * d, kv_rows = g.n_kv_heads * d;
        expect(q_rows + 2 * kv_rows, out_dim, "fused qkv rows = (heads + 2 x kv heads) x head_dim");
        if (layout == QkvLayout::interleaved_per_head) {
            expect(g.n_heads, g.n_kv_heads, "interleaved qkv needs kv heads == heads");
            add_rows(Role::attn_q, g.n_heads, 0, 3 * d, d);
            add_rows(Role::attn_k, g.n_heads, d, 3 * d, d);
            add_rows(Role::attn_v, g.n_heads, 2 * d, 3 * d, d);
        } else if (layout == QkvLayout::grouped_by_kv) {
            // Group k: its query heads, then its key, then its value.
            const int group = g.group_size();
            const std::int64_t stride = (group + 2) * d;
            for (int k = 0; k < g.n_kv_heads; ++k) {
                for (int j = 0; j < group; ++j)
                    out.push_back({k * group + j, Role::attn_q, out_rows(k * stride + j * d, d)});
                out.push_back({k, Role::attn_k, out_rows(k * stride + group * d, d)});
                out.push_back({k, Role::attn_v, out_rows(k * stride + (group + 1) * d, d)});
            }
        } else {
            add_rows(Role::attn_q, g.n_heads, 0, d, d);
            add_rows(Role::attn_k, g.n_kv_heads, q_rows, d, d);
            add_rows(Role::attn_v, g.n_kv_heads, q_rows + kv_rows, d, d);
        }
    }
};

}  // namespace

std::vector<HeadBlock> head_blocks(const ModelSchema& schema, const TensorInfo& t, Role role) {
    const Layout layout = layout_of(schema, t);
    if (!layout.heads || t.shape.size() != 2 || !role_is_attention(role)) return {};
    Splitter s(t, *layout.heads, whole_matrix(schema, t));
    s.check_width(role);
    switch (role) {
        case Role::attn_q:
            s.query();
            break;
        case Role::attn_k:
        case Role::attn_v:
            s.key_or_value(role);
            break;
        case Role::attn_kv_b:
            s.latent_key_value();
            break;
        case Role::attn_o:
            s.output();
            break;
        case Role::attn_qkv:
            s.fused(layout.qkv);
            break;
        default:  // a latent model's low-rank down-projections: no heads
            break;
    }
    return std::move(s.out);
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
