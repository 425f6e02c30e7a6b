"""Accuracy of compare's Gram route against numpy's f64 SVD, as a function of λ_min/λ_max.

For each σ_min/σ_max ratio: a base B = Q1 diag(σ) Q2ᵀ with a geometric spectrum from 1 down to the
ratio, a model M = B + noise + a rank-5 update; the overlaps |U_bᵀ U_m| are computed exactly (SVD)
and by the Gram route (eigh of BᵀB and MᵀM, long side by (V_bᵀ BᵀM V_m) / (σ_b σ_m)). Prints the
worst single overlap error and the error of the agreement means. Used for kGramVectorGuard
(include/diffract/linalg/gram_pair.hpp):  python3 bench/gram_accuracy.py --n 512 1024
"""
import argparse

import numpy as np


def svd_ascending(x):
    u, s, vt = np.linalg.svd(x)
    return u[:, ::-1], s[::-1], vt[::-1].T


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, nargs="+", default=[512])
    p.add_argument("--sigma-ratios", type=float, nargs="+", default=[1e-2, 1e-3, 1e-4, 10 ** -4.5, 1e-5])
    a = p.parse_args()
    rng = np.random.default_rng(1)
    for n in a.n:
        for ratio in a.sigma_ratios:
            q1, _ = np.linalg.qr(rng.standard_normal((n, n)))
            q2, _ = np.linalg.qr(rng.standard_normal((n, n)))
            s = np.logspace(0, np.log10(ratio), n)
            b = (q1 * s) @ q2.T
            m = b + 0.02 * ratio * rng.standard_normal((n, n)) / np.sqrt(n) \
                + 0.01 * (q1[:, :5] @ rng.standard_normal((5, n))) / np.sqrt(n)
            ub, _, _ = svd_ascending(b)
            um, _, _ = svd_ascending(m)
            exact = np.abs(ub.T @ um)
            lb, vb = np.linalg.eigh(b.T @ b)
            lm, vm = np.linalg.eigh(m.T @ m)
            gram = np.abs((vb.T @ (b.T @ m) @ vm) / np.outer(np.sqrt(np.maximum(lb, 0)), np.sqrt(np.maximum(lm, 0))))
            worst = np.abs(np.diag(gram) - np.diag(exact)).max()
            mean_err = max(abs(np.diag(gram).mean() - np.diag(exact).mean()), abs(gram.max(1).mean() - exact.max(1).mean()))
            print(f"n={n} lambda_min/lambda_max={lb[0] / lb[-1]:.1e} worst_overlap_err={worst:.1e} mean_err={mean_err:.1e}")


if __name__ == "__main__":
    main()
