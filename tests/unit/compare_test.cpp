#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "diffract/analysis/compare.hpp"
#include "diffract/analysis/head_ranking.hpp"
#include "diffract/core/error.hpp"
#include "diffract/linalg/backend.hpp"

#include "random_matrix.hpp"

using namespace diffract;
using diffract::test_data::random_matrix;
using namespace diffract::analysis;

namespace {

// A random d × d orthogonal matrix.
Matrix<double> random_orthogonal(std::int64_t d, std::uint64_t seed) {
    return test_data::orthonormal_columns(d, d, seed);
}

Matrix<double> matmul(const Matrix<double>& a, const Matrix<double>& b) {
    Matrix<double> c(a.rows, b.cols);
    for (std::int64_t i = 0; i < a.rows; ++i)
        for (std::int64_t k = 0; k < a.cols; ++k)
            for (std::int64_t j = 0; j < b.cols; ++j) c(i, j) += a(i, k) * b(k, j);
    return c;
}

HeadStats head(int layer, int h, double q, double k, double v, double o) {
    HeadStats s;
    s.layer = layer, s.head = h;
    s.block_norm[0] = q, s.block_norm[1] = k, s.block_norm[2] = v, s.block_norm[3] = o;
    return s;
}

}  // namespace

TEST(Compare, SelfCompareIsZeroWithAgreementOne) {
    auto backend = linalg::make_backend("cpu");
    const auto w = random_matrix(24, 40, 1);
    const auto f = compare_matrices(w, w, 5, *backend);
    for (const char* name :
         {"delta_frob_norm", "rel_delta_frob_norm", "delta_l2_norm", "rel_sval_change", "esd_ks"})
        EXPECT_EQ(f.scalars.at(name), 0.0) << name;
    for (const char* name : {"avg_l_agreement", "avg_max_l_agreement", "avg_r_agreement",
                             "avg_max_r_agreement", "topk_avg_l_agreement", "topk_avg_max_l_agreement",
                             "topk_avg_r_agreement", "topk_avg_max_r_agreement"})
        EXPECT_NEAR(f.scalars.at(name), 1.0, 1e-12) << name;
    EXPECT_EQ(f.scalars.at("top_k"), 5.0);
    EXPECT_EQ(f.vectors.at("l_agreement").size(), 24u);
    EXPECT_DOUBLE_EQ(f.scalars.at("chance_l_agreement"), 1.0 / std::sqrt(24.0));
    EXPECT_DOUBLE_EQ(f.scalars.at("chance_r_agreement"), 1.0 / std::sqrt(40.0));
    EXPECT_DOUBLE_EQ(f.scalars.at("chance_max_l_agreement"), std::sqrt(2.0 * std::log(24.0) / 24.0));
    EXPECT_DOUBLE_EQ(f.scalars.at("chance_topk_max_r_agreement"), std::sqrt(2.0 * std::log(5.0) / 40.0));
}

TEST(Compare, SignFlipsOfSingularVectorsChangeNothing) {
    auto backend = linalg::make_backend("cpu");
    const auto a = random_matrix(30, 20, 2);
    auto b = a;
    const auto noise = random_matrix(30, 20, 3);
    for (std::size_t i = 0; i < b.data.size(); ++i) b.data[i] += 0.05 * noise.data[i];
    const auto sa = backend->svd(a), sb = backend->svd(b);
    const auto ref = compare_factorizations(sa, sb, 30, 20, 4);
    // Flip u_c and v_c together (the same matrix) for every other component, in either model.
    auto flip = [](linalg::Svd s, int parity) {
        for (std::int64_t c = parity; c < static_cast<std::int64_t>(s.s.size()); c += 2) {
            for (std::int64_t i = 0; i < s.u.rows; ++i) s.u(i, c) = -s.u(i, c);
            for (std::int64_t j = 0; j < s.v.rows; ++j) s.v(j, c) = -s.v(j, c);
        }
        return s;
    };
    for (const auto& [x, y] :
         {std::pair{flip(sa, 0), sb}, std::pair{sa, flip(sb, 1)}, std::pair{flip(sa, 1), flip(sb, 0)}}) {
        const auto f = compare_factorizations(x, y, 30, 20, 4);
        for (const auto& [name, value] : ref.scalars) EXPECT_NEAR(f.scalars.at(name), value, 1e-14) << name;
        for (const auto& [name, vec] : ref.vectors)
            for (std::size_t i = 0; i < vec.size(); ++i)
                EXPECT_NEAR(f.vectors.at(name)[i], vec[i], 1e-14) << name;
    }
    EXPECT_GT(ref.scalars.at("avg_l_agreement"), 0.5);
    EXPECT_LT(ref.scalars.at("avg_l_agreement"), 1.0);
}

TEST(Compare, RotationKeepsTheSpectrumAndMovesOnlyThatSide) {
    auto backend = linalg::make_backend("cpu");
    const auto w = random_matrix(16, 64, 4);
    const auto rotated = matmul(random_orthogonal(16, 5), w);  // left vectors rotate, right ones stay
    const auto f = compare_matrices(w, rotated, 4, *backend);
    EXPECT_LT(f.scalars.at("rel_sval_change"), 1e-12);
    // Equal up to rounding: the two samples interleave, one step of 1/k at most.
    EXPECT_LE(f.scalars.at("esd_ks"), 1.0 / 16 + 1e-15);
    EXPECT_LT(f.scalars.at("avg_l_agreement"), 2 * f.scalars.at("chance_l_agreement"));
    EXPECT_NEAR(f.scalars.at("avg_r_agreement"), 1.0, 1e-9);
    // The delta of a rotation is large: ||QW − W||_F ~ sqrt(2) ||W||_F.
    EXPECT_GT(f.scalars.at("rel_delta_frob_norm"), 1.0);
}

TEST(Compare, DeltaFieldsFollowTheReferenceFormulas) {
    auto backend = linalg::make_backend("cpu");
    Matrix<double> d(3, 2);
    d(0, 0) = 3, d(1, 1) = 4;  // singular values 3, 4
    FieldValues f;
    add_delta_fields(d, 10.0, *backend, linalg::SvdRoute::gesdd, f);
    EXPECT_NEAR(f.scalars.at("delta_frob_norm"), 5.0, 1e-15);
    EXPECT_NEAR(f.scalars.at("rel_delta_frob_norm"), 0.5, 1e-15);
    EXPECT_NEAR(f.scalars.at("delta_l2_norm"), 4.0, 1e-14);
    EXPECT_NEAR(f.scalars.at("delta_stable_rank"), 25.0 / 16.0, 1e-13);
    const double p1 = 3.0 / 7, p2 = 4.0 / 7;
    EXPECT_NEAR(f.scalars.at("delta_effective_rank"), std::exp(-(p1 * std::log(p1) + p2 * std::log(p2))),
                1e-12);
}

TEST(HeadRanking, Scale01) {
    const auto s = scale01({1, 2, 3, std::nan("")});
    EXPECT_DOUBLE_EQ(s[0], 0.0);
    EXPECT_DOUBLE_EQ(s[1], 0.5);
    EXPECT_DOUBLE_EQ(s[2], 1.0);
    EXPECT_TRUE(std::isnan(s[3]));
    for (double v : scale01({2, 2, 2})) EXPECT_EQ(v, 0.0);
}

TEST(HeadRanking, ImportanceOnHandMadeNorms) {
    // update_norm = 2 * q when all four blocks equal q.
    const std::vector<HeadStats> dom = {head(0, 0, 1, 1, 1, 1), head(0, 1, 3, 3, 3, 3),
                                        head(1, 0, 5, 5, 5, 5), head(1, 1, 2, 2, 2, 2)};
    const std::vector<HeadStats> ref = {head(0, 0, 1, 1, 1, 1), head(0, 1, 1, 1, 1, 1),
                                        head(1, 0, 1, 1, 1, 1), head(1, 1, 4, 4, 4, 4)};
    const auto r = rank_heads(dom, &ref, {});
    // domain norms 2, 6, 10, 4 → 0, .5, 1, .25; reference 2, 2, 2, 8 → 0, 0, 0, 1.
    EXPECT_DOUBLE_EQ(r[0].update_norm, 2.0);
    EXPECT_DOUBLE_EQ(r[3].ref_update_norm, 8.0);
    EXPECT_DOUBLE_EQ(r[0].importance, 0.0);
    EXPECT_DOUBLE_EQ(r[1].importance, 0.5);
    EXPECT_DOUBLE_EQ(r[2].importance, 1.0);
    EXPECT_DOUBLE_EQ(r[3].importance, -0.75);
    EXPECT_EQ(r[3].rank, 0);
    EXPECT_EQ(r[0].rank, 1);
    EXPECT_EQ(r[1].rank, 2);
    EXPECT_EQ(r[2].rank, 3);

    // Per layer: layer 0 domain 2, 6 → 0, 1; ref 2, 2 → 0, 0. Layer 1 domain 10, 4 → 1, 0; ref 2, 8 → 0, 1.
    const auto l = rank_heads(dom, &ref, {ScaleScope::layer, HeadOrder::importance, 0});
    EXPECT_DOUBLE_EQ(l[0].importance, 0.0);
    EXPECT_DOUBLE_EQ(l[1].importance, 1.0);
    EXPECT_DOUBLE_EQ(l[2].importance, 1.0);
    EXPECT_DOUBLE_EQ(l[3].importance, -1.0);
    EXPECT_EQ(l[3].rank, 0);
    EXPECT_EQ(l[0].rank, 1);
    EXPECT_EQ(l[1].rank, 2);  // tie with (1, 0) broken by (layer, head)
    EXPECT_EQ(l[2].rank, 3);

    // No reference: the domain term alone.
    const auto n = rank_heads(dom, nullptr, {});
    EXPECT_DOUBLE_EQ(n[3].importance, 0.25);
    EXPECT_TRUE(std::isnan(n[3].ref_update_norm));
}

TEST(HeadRanking, ProjectionScopeAveragesPerBlockScores) {
    const std::vector<HeadStats> dom = {head(0, 0, 0, 10, 0, 0), head(0, 1, 1, 0, 1, 1)};
    const auto r = rank_heads(dom, nullptr, {ScaleScope::projection, HeadOrder::importance, 0});
    // Q, V, O: head 0 → 0, head 1 → 1; K: head 0 → 1, head 1 → 0.
    EXPECT_DOUBLE_EQ(r[0].importance, 0.25);
    EXPECT_DOUBLE_EQ(r[1].importance, 0.75);
    // Globally head 0 has the larger update (10 vs sqrt 3).
    const auto g = rank_heads(dom, nullptr, {});
    EXPECT_GT(g[0].importance, g[1].importance);
    // A projection absent everywhere (NaN) is not averaged in.
    auto partial = dom;
    for (auto& h : partial) h.block_norm[1] = std::nan("");
    const auto p = rank_heads(partial, nullptr, {ScaleScope::projection, HeadOrder::importance, 0});
    EXPECT_DOUBLE_EQ(p[0].importance, 0.0);
    EXPECT_DOUBLE_EQ(p[1].importance, 1.0);
}

TEST(HeadRanking, AlternativeOrders) {
    std::vector<HeadStats> dom;
    for (int h = 0; h < 6; ++h) {
        auto s = head(h / 3, h % 3, 1, 1, 1, 1);
        s.agreement = 0.1 * h;
        s.pl_ks = 0.05 * (6 - h);
        dom.push_back(s);
    }
    const auto a = rank_heads(dom, nullptr, {ScaleScope::global, HeadOrder::agreement, 0});
    for (int h = 0; h < 6; ++h) EXPECT_EQ(a[static_cast<std::size_t>(h)].rank, 5 - h);  // most agreeing first
    const auto k = rank_heads(dom, nullptr, {ScaleScope::global, HeadOrder::pl_ks, 0});
    for (int h = 0; h < 6; ++h) EXPECT_EQ(k[static_cast<std::size_t>(h)].rank, h);  // largest KS first
    const auto i = rank_heads(dom, nullptr, {});  // all importances 0: (layer, head) order
    for (int h = 0; h < 6; ++h) EXPECT_EQ(i[static_cast<std::size_t>(h)].rank, h);
    const auto r1 = rank_heads(dom, nullptr, {ScaleScope::global, HeadOrder::random, 7});
    const auto r2 = rank_heads(dom, nullptr, {ScaleScope::global, HeadOrder::random, 7});
    std::set<int> ranks;
    for (std::size_t h = 0; h < 6; ++h) {
        EXPECT_EQ(r1[h].rank, r2[h].rank);
        ranks.insert(r1[h].rank);
    }
    EXPECT_EQ(ranks.size(), 6u);
    bool differs = false;
    for (std::uint64_t seed = 8; seed < 12 && !differs; ++seed) {
        const auto r3 = rank_heads(dom, nullptr, {ScaleScope::global, HeadOrder::random, seed});
        for (std::size_t h = 0; h < 6; ++h) differs = differs || r3[h].rank != r1[h].rank;
    }
    EXPECT_TRUE(differs);
    EXPECT_THROW(parse_head_order("bogus"), InputError);
    try {
        parse_head_order("bogus", "--orders");  // the sweep's flag is named in its error
        ADD_FAILURE();
    } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("--orders: ", 0), 0u) << e.what();
    }
    EXPECT_EQ(parse_scale_scope("layer"), ScaleScope::layer);
}
