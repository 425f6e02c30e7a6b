#!/usr/bin/env python3
"""What a field costs, as `diffract metrics` lists it: `diffract analyze --metrics F` on one model for a
field of each cost class (fresh store each run, --threads 1, best of --reps, interleaved), in seconds and
against the singular values alone (--metrics max_weights_sval).
Usage: python3 bench/field_costs.py MODEL [--reps 3] [--build build]"""
import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--build", default="build")
ap.add_argument("--extra", default="", help="more analyze options, e.g. '--no-heads'")
args = ap.parse_args()

FIELDS = ["max_weights_sval", "weights_std", "pl_alpha", "tpl_alpha", "expon_lambda", "w1_rand_distance",
          "mp_soft_rank", "pl_alpha_ci_low --alpha-ci 100", "pl_p_value", "tpl_p_value", "expon_p_value",
          "default", "all"]
binary = str(Path(args.build).resolve() / "diffract")
work = Path(tempfile.mkdtemp(prefix="field-costs-"))


def once(spec):
    field, *extra = spec.split()
    shutil.rmtree(work / "out", ignore_errors=True)
    (work / "s.sqlite").unlink(missing_ok=True)
    start = time.monotonic()
    subprocess.run([binary, "analyze", args.model, "--metrics", field, "--out", str(work / "out"), "--store",
                    str(work / "s.sqlite"), "--threads", "1", "--quiet", "--quiet", *extra, *args.extra.split()],
                   check=True, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


best = {f: float("inf") for f in FIELDS}
for _ in range(args.reps):
    for f in FIELDS:
        best[f] = min(best[f], once(f))
base = best["max_weights_sval"]
print(f"| --metrics | seconds | × values alone |\n|---|---|---|")
for f in FIELDS:
    print(f"| `{f}` | {best[f]:.2f} | {best[f] / base:.1f}× |")
