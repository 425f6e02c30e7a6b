"""Spread of the power-law exponent against the tail size, on simulated samples with a known exponent.

The evidence for the minimum tail size of the fits (kernel setting `min_fit_size`, docs/metrics.md).
Three settings, each with `--reps` seeded replicates per (alpha, n):

  known   n Pareto(alpha, x_min = 1) points, x_min known: the closed-form MLE 1 + n / sum ln x
          (numpy; its standard error is (alpha - 1) / sqrt(n), Clauset, Shalizi & Newman 2009, eq. 3.2).
  search  the same n points through our fit (tests/tools/spectral_fit_tool: powerlaw 1.5's KS search
          for x_min, then the MLE), as analyze runs it.
  planted n Pareto(alpha) points above a Marchenko-Pastur bulk of 300 eigenvalues (a 300 x 600
          Gaussian matrix's ESD, x_min = 1.05 x its largest eigenvalue), through our fit: the search
          must find the tail, as on a trained matrix.

For each: the median and the 5-95 % range of alpha_hat, its RMSE, the fraction with |alpha_hat - alpha| >
0.5 and (search, planted) the median fitted tail size. Prints a markdown table.

    python3 bench/fit_variance.py [--reps 200] [--tool build/tests/spectral_fit_tool]
"""
import argparse
import json
import subprocess

import numpy as np


def fit_tool(tool, esd):
    out = subprocess.run([tool], input=json.dumps({"esd": list(map(float, esd))}), capture_output=True,
                         text=True, check=True)
    r = json.loads(out.stdout)
    return (np.nan if r["pl_alpha"] is None else r["pl_alpha"]), r["pl_n_tail"]


def pareto(rng, alpha, n, xmin=1.0):
    return xmin * (1.0 - rng.random(n)) ** (-1.0 / (alpha - 1.0))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--tool", default="build/tests/spectral_fit_tool")
    p.add_argument("--alphas", type=float, nargs="+", default=[2.5, 4.0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 30, 50, 75, 100, 200, 400])
    a = p.parse_args()
    print("| setting | alpha | n | median alpha_hat | 5-95 % | RMSE | P(err > 0.5) | median fitted n_tail |")
    print("|---|---|---|---|---|---|---|---|")
    for alpha in a.alphas:
        for n in a.sizes:
            rng = np.random.default_rng([int(alpha * 10), n])
            rows = {"known": ([], []), "search": ([], []), "planted": ([], [])}
            for _ in range(a.reps):
                x = pareto(rng, alpha, n)
                rows["known"][0].append(1.0 + n / np.log(x).sum())
                rows["known"][1].append(n)
                est, nt = fit_tool(a.tool, np.sort(x))
                rows["search"][0].append(est)
                rows["search"][1].append(nt)
                g = rng.normal(size=(300, 600))
                bulk = np.linalg.eigvalsh(g @ g.T / 600.0)
                tail = pareto(rng, alpha, n, xmin=1.05 * bulk.max())
                est, nt = fit_tool(a.tool, np.sort(np.concatenate([bulk, tail])))
                rows["planted"][0].append(est)
                rows["planted"][1].append(nt)
            for setting, (est, nt) in rows.items():
                e = np.array(est, dtype=float)
                e = e[np.isfinite(e)]
                lo, med, hi = np.percentile(e, [5, 50, 95])
                rmse = float(np.sqrt(np.mean((e - alpha) ** 2)))
                bad = float(np.mean(np.abs(e - alpha) > 0.5))
                print(f"| {setting} | {alpha:g} | {n} | {med:.3f} | {lo:.2f}-{hi:.2f} | {rmse:.3f} | {bad:.2f} | "
                      f"{int(np.median(nt))} |", flush=True)


if __name__ == "__main__":
    main()
