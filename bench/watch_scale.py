#!/usr/bin/env python3
"""Does `diffract watch` scale with the length of a run? Runs of N tiny checkpoints (step_<k>/, each
a hard-linked copy of one generated model: the store computes the first and reuses the rest, as a run
re-watched or a run whose steps share tensors) for each N of --sizes, timing
  watch_s     one `diffract watch` over the run (a fresh store)
  rewatch_s   the same watch again (every result in the store)
  analyze_s   one `diffract analyze` of the N checkpoint directories (the same store: all reused)
and printing seconds per checkpoint (flat when appending a checkpoint costs O(its rows); growing with N
when every checkpoint rewrites every table) and rewatch_s / analyze_s (issue 49: within 2).
Usage: python3 bench/watch_scale.py [--sizes 100,1000] [--build build]"""
import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="100,1000")
ap.add_argument("--build", default="build")
args = ap.parse_args()
binary = str(Path(args.build) / "diffract")
root = Path(tempfile.mkdtemp(prefix="watch-scale-"))
subprocess.run([binary, "generate", "--out", root / "fam", "--dtype", "F32", "--layers", "1", "--hidden", "64",
                "--heads", "4", "--intermediate", "128", "--vocab", "128", "--domain-heads", "1",
                "--generic-heads", "1"], check=True, capture_output=True)
model = root / "fam" / "pretrained"


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


print(f"{'N':>6} {'watch_s':>9} {'per_ckpt_ms':>11} {'rewatch_s':>9} {'per_ckpt_ms':>11} {'analyze_s':>9} "
      f"{'rewatch/analyze':>15}")
for n in map(int, args.sizes.split(",")):
    run = root / f"run{n}"
    for k in range(n):
        d = run / f"step_{k + 1}"
        d.mkdir(parents=True)
        for f in model.iterdir():
            os.link(f, d / f.name)
    store = root / f"s{n}.sqlite"
    watch = [binary, "watch", run, "--out", root / f"w{n}", "--store", store, "--settle", "0", "--quiet", "--quiet"]
    w1 = timed(watch)
    w2 = timed(watch)
    an = timed([binary, "analyze", *sorted(run.iterdir()), "--out", root / f"a{n}", "--store", store, "--quiet",
                "--quiet"])
    print(f"{n:>6} {w1:>9.2f} {1000 * w1 / n:>11.1f} {w2:>9.2f} {1000 * w2 / n:>11.1f} {an:>9.2f} {w2 / an:>15.2f}")
    shutil.rmtree(run)
shutil.rmtree(root)
