#!/usr/bin/env python3
"""Which f32 Gram routes could meet the f32 tier's contract (issue 36; docs/metrics.md "The f32 tier's
contract"): per field, the largest relative error against f64 LAPACK of

  sgesdd          f32 LAPACK sgesdd through SciPy, values and vectors (the contract's reference: torch's
                  f32 GPU SVD; not numpy's svd, whose result on f32 arrays is f64-accurate)
  f32 G, f64 eig  the Gram product in f32 (sgemm/ssyrk), its eigen-decomposition in f64 (the f32 tier's
                  values route today)
  f32 G, f32 eig  product and eigen-decomposition in f32 (ssyevd): what would halve the eigen-solver's
                  time too

on the contract test's matrices: an OLMo-2-1B-shaped layer's q_proj (2048²), up_proj (8192 × 2048) and
down_proj (2048 × 8192), each with a fine-tuned counterpart (tests/python/test_f32_contract.py builds the
same), and a 1024 × 256 pair. Analyze's values-only fields come from one matrix, compare's agreement and
spectral-change fields from the pair (the Gram route's formulas of analysis/compare.cpp: short-side
overlaps V_bᵀV_m, long-side (V_bᵀ BᵀM V_m)/(σ_b σ_m)). numpy and SciPy only: an independent measurement,
not our code. A route meets the contract on a field when its error is at most sgesdd's + 2 f32 ulps.

    python3 bench/f32_gram_routes.py [--seed 36]
"""
import argparse

import numpy as np
import scipy.linalg as sl

MARGIN = 2 * 2.0**-23
# The f32 tier's guard (src/linalg/cpu/block_values_impl.hpp: kF32GramMinAspect, kF32GramGuard): the matrices
# its f32 Gram product serves; the others are computed in f64.
MIN_ASPECT, MIN_RATIO = 4.0, 1e-3
TOP_K = 10


def layer_pair(rng, m, n):
    """The contract test's construction: Gaussian weights with a planted rank-8 spike; the fine-tuned
    counterpart adds a rank-4 update and noise."""
    w = 0.02 * rng.standard_normal((m, n), dtype=np.float32)
    w += (rng.standard_normal((m, 8), dtype=np.float32) @ rng.standard_normal((8, n), dtype=np.float32)) / 200
    ft = w + (rng.standard_normal((m, 4), dtype=np.float32) @ rng.standard_normal((4, n), dtype=np.float32)) / 2000
    ft += 0.002 * rng.standard_normal((m, n), dtype=np.float32)
    return w.astype(np.float32), ft.astype(np.float32)


def value_fields(s):
    """Values-only catalog fields from ascending singular values."""
    p = s[s > 0] / s.sum()
    return {"min_weights_sval": s[0], "max_weights_sval": s[-1], "nuclear_norm": s.sum(),
            "stable_rank": (s**2).sum() / s[-1] ** 2, "effective_rank": np.exp(-(p * np.log(p)).sum())}


def agreement_fields(sb, sm, left, right):
    """compare's spectral-change and agreement fields; overlaps have the base's components as rows."""
    out = {"rel_sval_change": np.linalg.norm(sm - sb) / np.linalg.norm(sb)}
    for side, o in (("l", np.abs(left)), ("r", np.abs(right))):
        k = o.shape[0]
        first = k - min(TOP_K, k)
        out[f"avg_{side}_agreement"] = np.diag(o).mean()
        out[f"avg_max_{side}_agreement"] = o.max(axis=1).mean()
        out[f"topk_avg_{side}_agreement"] = np.diag(o)[first:].mean()
        out[f"topk_avg_max_{side}_agreement"] = o[first:, first:].max(axis=1).mean()
    return out


def svd_ascending(w, dtype):
    # SciPy, not numpy: numpy's svd of an f32 array is accurate to f32 rounding (it is not sgesdd's accuracy).
    u, s, vt = sl.svd(w.astype(dtype), full_matrices=False, lapack_driver="gesdd")
    return u[:, ::-1].astype(np.float64), s[::-1].astype(np.float64), vt[::-1].astype(np.float64)


def gram(x, eig_dtype, vectors):
    """Eigen-decomposition (ascending, LAPACK syevd) of the short side's Gram matrix of f32 x, formed in f32."""
    g = (x.T @ x) if x.shape[0] >= x.shape[1] else (x @ x.T)
    lam, v = sl.eigh(g.astype(eig_dtype), driver="evd") if vectors else (
        sl.eigh(g.astype(eig_dtype), driver="evd", eigvals_only=True), None)
    return lam.astype(np.float64), v


def gram_values(w, eig_dtype):
    lam, _ = gram(w, eig_dtype, False)
    return np.sqrt(np.maximum(lam, 0.0))


def gram_compare(b, m, eig_dtype):
    """The Gram route of compare with f32 products and eigen-decompositions in eig_dtype."""
    tall = b.shape[0] >= b.shape[1]
    x, y = (b, m) if tall else (b.T, m.T)  # long side first: x is length × k
    lb, vb = gram(x, eig_dtype, True)
    lm, vm = gram(y, eig_dtype, True)
    cross = (x.T @ y).astype(eig_dtype)
    sb, sm = np.sqrt(np.maximum(lb, 0.0)), np.sqrt(np.maximum(lm, 0.0))
    short = (vb.T @ vm).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        long_side = (vb.T @ cross @ vm).astype(np.float64) / np.outer(sb, sm)
    # Short side = columns of a tall matrix (its right vectors).
    return agreement_fields(sb, sm, long_side, short) if tall else agreement_fields(sb, sm, short, long_side)


def relative(ref, got):
    return {f: abs(got[f] - v) / abs(v) if np.isfinite(got[f]) else np.inf for f, v in ref.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=36)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    shapes = {"q_proj 2048x2048": (2048, 2048), "up_proj 8192x2048": (8192, 2048),
              "down_proj 2048x8192": (2048, 8192), "1024x256": (1024, 256)}
    routes = ("sgesdd", "f32 G, f64 eig", "f32 G, f32 eig")
    worst = {}
    print("| matrix | λ_min/λ_max | field | sgesdd | f32 G, f64 eig | f32 G, f32 eig |")
    print("|---|---|---|---|---|---|")
    for name, (rows, cols) in shapes.items():
        base, tuned = layer_pair(rng, rows, cols)
        s64 = np.linalg.svd(tuned.astype(np.float64), compute_uv=False)[::-1]
        ref = value_fields(s64)
        sgesdd = sl.svd(tuned, compute_uv=False, lapack_driver="gesdd")[::-1].astype(np.float64)
        errors = {"sgesdd": relative(ref, value_fields(sgesdd)),
                  "f32 G, f64 eig": relative(ref, value_fields(gram_values(tuned, np.float64))),
                  "f32 G, f32 eig": relative(ref, value_fields(gram_values(tuned, np.float32)))}
        ub, sb, vbt = svd_ascending(base, np.float64)
        um, sm, vmt = svd_ascending(tuned, np.float64)
        ref = agreement_fields(sb, sm, ub.T @ um, vbt @ vmt.T)
        ub, sb, vbt = svd_ascending(base, np.float32)
        um, sm, vmt = svd_ascending(tuned, np.float32)
        errors["sgesdd"].update(relative(ref, agreement_fields(sb, sm, ub.T @ um, vbt @ vmt.T)))
        for route, eig in (("f32 G, f64 eig", np.float64), ("f32 G, f32 eig", np.float32)):
            errors[route].update(relative(ref, gram_compare(base, tuned, eig)))
        lam = s64**2
        admitted = max(rows, cols) >= MIN_ASPECT * min(rows, cols) and lam[0] >= MIN_RATIO * lam[-1]
        for field in errors["sgesdd"]:
            e = [errors[r][field] for r in routes]
            print(f"| {name} | {lam[0] / lam[-1]:.1e} | `{field}` | " + " | ".join(f"{x:.1e}" for x in e) + " |")
            for r in routes[1:]:
                if e[routes.index(r)] > e[0] + MARGIN:
                    worst.setdefault((r, admitted), set()).add(field)
    print()
    for r in routes[1:]:
        for admitted, which in ((True, "the matrices the f32 guard admits"), (False, "the others")):
            fields = sorted(worst.get((r, admitted), ()))
            print(f"{r}, {which}: " + (f"outside the contract on {', '.join(fields)}" if fields
                                         else "within the contract on every field"))


if __name__ == "__main__":
    main()
