// The permutation null of entries the computation owns is shuffled in place (one copy of a matrix in
// memory, not two): every field equals the one computed from the caller's entries, which are copied
// before the shuffle, for one null draw and for several (where the entries stay for the later draws).
#include <gtest/gtest.h>

#include <cmath>

#include "diffract/analysis/catalog.hpp"
#include "diffract/linalg/backend.hpp"
#include "random_matrix.hpp"

using namespace diffract;
using analysis::KernelConfig;
using analysis::MatrixInput;

namespace {

void expect_same(const FieldValues& a, const FieldValues& b) {
    ASSERT_EQ(a.scalars.size(), b.scalars.size());
    for (const auto& [name, x] : a.scalars) {
        ASSERT_TRUE(b.scalars.count(name)) << name;
        const double y = b.scalars.at(name);
        if (std::isnan(x))
            EXPECT_TRUE(std::isnan(y)) << name;
        else
            EXPECT_EQ(x, y) << name;
    }
    ASSERT_EQ(a.vectors.size(), b.vectors.size());
    for (const auto& [name, v] : a.vectors) EXPECT_EQ(v, b.vectors.at(name)) << name;
}

}  // namespace

TEST(NullInPlace, OwnedEntriesGiveTheFieldsOfTheCallersEntries) {
    auto backend = linalg::make_backend("cpu");
    const auto fields = analysis::resolve_metrics("default");
    const auto w = test_data::random_matrix(70, 45, 5);
    for (const int draws : {1, 3}) {
        KernelConfig cfg;
        cfg.null_draws = draws;
        const auto callers = analysis::compute_fields(w, fields, cfg, *backend);

        MatrixInput<double> handed;
        handed.rows = w.rows, handed.cols = w.cols, handed.entries = w;
        handed.read = [&] { return w; };
        const auto owned = analysis::compute_fields(std::move(handed), fields, cfg, *backend);

        MatrixInput<double> lazy;
        lazy.rows = w.rows, lazy.cols = w.cols;
        lazy.read = [&] { return w; };
        const auto read = analysis::compute_fields(std::move(lazy), fields, cfg, *backend);

        SCOPED_TRACE(draws);
        expect_same(callers, owned);
        expect_same(callers, read);
        // The null is a permutation of the same entries: other singular values, the same norm.
        const auto& s = callers.vectors.at("weights_svals");
        const auto& r = callers.vectors.at("weights_rand_svals");
        ASSERT_EQ(s.size(), r.size());
        EXPECT_NE(s.back(), r.back());
        double ss = 0, rr = 0;
        for (std::size_t i = 0; i < s.size(); ++i) ss += s[i] * s[i], rr += r[i] * r[i];
        EXPECT_NEAR(ss / rr, 1.0, 1e-12);
    }
}
