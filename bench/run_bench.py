#!/usr/bin/env python3
"""Runs bench_analyze and, in the same run, the plain numpy baseline over the same matrix shapes
(np.linalg.svd(w, compute_uv=False) on float32, one after another — what a Python user writes), then
prints both and the ratios. Usage: python3 bench/run_bench.py [--layers 2] [--build build]"""
import argparse
import json
import subprocess
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--build", default="build")
args = ap.parse_args()

ours = json.loads(subprocess.run([f"{args.build}/bench/bench_analyze", "--layers", str(args.layers)],
                                 capture_output=True, text=True, check=True).stdout)
hidden, heads, head_dim, mlp = 2048, 16, 128, 8192
shapes = []
for _ in range(args.layers):
    shapes += [(hidden, hidden)] * 4 + [(mlp, hidden)] * 2 + [(hidden, mlp)]
    shapes += [(head_dim, hidden)] * (3 * heads) + [(hidden, head_dim)] * heads
rng = np.random.default_rng(0)
mats = [rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[1]) for s in shapes]
np.linalg.svd(mats[-1], compute_uv=False)
t = time.perf_counter()
for m in mats:
    np.linalg.svd(m, compute_uv=False)
numpy_s = time.perf_counter() - t
ours["numpy_loop_s"] = round(numpy_s, 3)
ours["speedup_values_vs_numpy"] = round(numpy_s / ours["values_s"], 2)
ours["speedup_catalog_vs_numpy_values_only"] = round(numpy_s / ours["catalog_s"], 2)
print(json.dumps(ours, indent=1))
