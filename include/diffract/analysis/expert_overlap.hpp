// Expert redundancy: how alike the routed experts of one mixture-of-experts layer are, as the overlap of
// their top-k singular subspaces (compare's expert_overlap.csv, docs/formats/moe.md).
//
// Experts share only the model's hidden space: an expert's intermediate space is its own (permuting its
// intermediate units changes nothing the model computes), so their subspaces are compared in the
// hidden space, on two sides:
//   read:  the top-k right singular vectors of the expert's input projections, gate and up stacked by
//          rows (2I × H; a fused gate_up as stored, whose row order does not change them): the
//          directions of the hidden state the expert responds to;
//   write: the top-k left singular vectors of its down projection (H × I): the directions it writes.
// For two experts' orthonormal bases A and B (H × k), with cos θ_i the singular values of AᵀB (the
// cosines of their k principal angles):
//   overlap = ‖AᵀB‖²_F / k = mean cos² θ_i   (1: the same subspace; 0: orthogonal ones)
//   max_cos = cos θ_1 = σ_max(AᵀB)           (the smallest principal angle)
// Chance: two uniformly random k-dimensional subspaces of R^n have E[overlap] = k/n exactly, and the
// top-k singular subspace of a Gaussian matrix of any shape is such a uniformly random subspace, so
// the floor depends on (n, k) alone; its 99th percentile is estimated from seeded draws
// (chance_floor).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "diffract/core/matrix.hpp"
#include "diffract/core/names.hpp"

namespace diffract::linalg {
class Backend;
}

namespace diffract::analysis {

enum class SubspaceSide { read, write };
inline constexpr NameTable<SubspaceSide, 2> kSubspaceSideNames{
    {{SubspaceSide::read, "read"}, {SubspaceSide::write, "write"}}};

// compare --overlap-k's default (0: no overlaps).
inline constexpr int kDefaultOverlapK = 8;
// Draws of the chance floor's 99th percentile: its Monte-Carlo standard error is then ~1 % of the
// floor's spread (the percentile of 2000 draws moves by a few draws' width between seeds).
inline constexpr int kChanceDraws = 2000;
inline constexpr double kChancePercentile = 0.99;
// A subspace is undefined when σ_k ≤ this · σ_1: a matrix of rank under k. (λ = σ² comes from the Gram
// matrix, whose absolute error ~ε·λ_1 leaves no digit of a σ_k/σ_1 under ~1e-8; 1e-6 keeps a margin.)
inline constexpr double kSubspaceRankGuard = 1e-6;

// An orthonormal basis of a top-k singular subspace: column-major n × k. An empty basis is undefined
// (a matrix of rank under k, or with NaN/Inf entries): its overlaps are NaN.
struct Subspace {
    std::int64_t n = 0, k = 0;
    std::vector<double> basis;
    bool defined() const { return !basis.empty(); }
};

// The top-k singular subspace of the row-major m × n matrix `w`: its right singular vectors
// (`right`: in R^n) or its left ones (in R^m), k clamped to min(m, n). From the Gram matrix of w's
// shorter side (Backend::gram) and its k largest eigenpairs (Backend::top_symmetric_eigen); the
// other side's vectors are w·v/σ or wᵀ·u/σ. Undefined under kSubspaceRankGuard or with NaN/Inf entries.
Subspace top_singular_subspace(const Matrix<double>& w, std::int64_t k, bool right, linalg::Backend& backend);

struct SubspaceOverlap {
    double overlap = std::numeric_limits<double>::quiet_NaN();  // ‖AᵀB‖²_F / k
    double max_cos = std::numeric_limits<double>::quiet_NaN();  // σ_max(AᵀB), in [0, 1]
    double min_angle_degrees() const;                           // acos(max_cos)
};

// The overlap of two subspaces of the same n and k; NaN where either is undefined or they differ.
SubspaceOverlap subspace_overlap(const Subspace& a, const Subspace& b, linalg::Backend& backend);

// The overlap of two uniformly random k-dimensional subspaces of R^n: its mean, k/n exactly, and its
// 99th percentile (nearest rank) over `draws` draws. By rotation invariance one of the two may be fixed:
// each draw is the overlap of span(e_1..e_k) with the top-k left singular subspace (an orthonormal basis
// of the span) of an n × k matrix of standard normals from Rng(stream_seed(seed, "expert_overlap",
// "NxK")), through the same top_singular_subspace and subspace_overlap as the experts'.
struct ChanceFloor {
    std::int64_t n = 0, k = 0;
    double mean = std::numeric_limits<double>::quiet_NaN();
    double p99 = std::numeric_limits<double>::quiet_NaN();
    int draws = 0;
};
ChanceFloor chance_floor(std::int64_t n, std::int64_t k, std::uint64_t seed, int draws,
                         linalg::Backend& backend);

// One pair a < b of a layer's routed experts on one side, in the base and in one model.
struct ExpertOverlapRow {
    std::string model, base;
    int layer = 0, expert_a = 0, expert_b = 0;
    SubspaceSide side = SubspaceSide::read;
    ChanceFloor floor;  // its n and k are the pair's
    SubspaceOverlap in_base, in_model;
    // Whether the overlap exceeds the chance floor's 99th percentile (false when NaN).
    bool base_above_chance() const { return in_base.overlap > floor.p99; }
    bool model_above_chance() const { return in_model.overlap > floor.p99; }
};

}  // namespace diffract::analysis
