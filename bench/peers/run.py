#!/usr/bin/env python3
"""diffract side by side with the reference library diffract-core and WeightWatcher (issue 16).

    python3 bench/peers/run.py [--cache DIR] [--layers 0] [--fields values|default|a,b,c] [--reps 3]
                               [--threads 1,2] [--tools diffract,diffract32,core,core32,ww] [--ww-python PY]

Creates its venvs under --cache (default /work/peers-venv; never inside the repository): Python 3.12
with diffract-core 0.3.1 (pyenv's 3.12), and a venv with torch + weightwatcher 0.7.7 unless
--ww-python names an interpreter that has them (e.g. /opt/torchenv/bin/python). Generates one
OLMo-2-1B-shaped checkpoint (cached there too), then runs the three tools on the same whole matrices,
interleaved (rep by rep, each thread count, each tool), each as a child process with
OMP/OPENBLAS/MKL_NUM_THREADS (and diffract --threads) set to the thread count. Prints per tool and
thread count the median wall time, CPU time and peak RSS (the child's own rusage), the ratios of
medians, and how far the deterministic fields agree.

Both precision tiers (issue 36), each tool at its own precision: `diffract` is the default f64 tier,
`diffract32` the same command with `--precision f32`; `core` gives diffract-core the weights widened to
f64 (its CPU accuracy), `core32` hands it f32 arrays (numpy's svd then runs LAPACK sgesdd, the f32
arithmetic of its torch GPU path). Each tier's ratios are against the diffract run of the same precision.

The peers are benchmark references only: nothing in diffract imports them.
"""
import argparse
import csv
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PY312 = Path.home() / ".pyenv/versions/3.12.1/bin/python3.12"

# Fields whose value needs only the singular values (plus the dimensions): the "values-only" workload.
VALUES_FIELDS = ("frob_norm,nuclear_norm,l2_norm,stable_rank,effective_rank,hard_rank,max_weights_sval,"
                 "min_weights_sval,esd_max,esd_min,weights_std")
# Fields built on the permutation null or on resampling: each tool draws its own permutation, so they are
# timed but not compared.
RANDOM_PREFIXES = ("esd_rand", "max_weights_rand", "min_weights_rand", "mp_", "tw_", "w1_rand", "weights_rand")

# WeightWatcher column -> (our metrics.csv field, conversion from WeightWatcher's value; N = greater dim)
# (docs/weightwatcher.md: its eigenvalues are sigma^2, ours sigma^2 / N).
WW_TO_OURS = {
    "sv_max": ("max_weights_sval", lambda v, n: v),
    "sv_min": ("min_weights_sval", lambda v, n: v),
    "norm": ("frob_norm", lambda v, n: math.sqrt(v)),
    "spectral_norm": ("l2_norm", lambda v, n: math.sqrt(v)),
    "lambda_max": ("esd_max", lambda v, n: v / n),
    "stable_rank": ("stable_rank", lambda v, n: v),
    "alpha": ("pl_alpha", lambda v, n: v),
    "D": ("pl_ks", lambda v, n: v),
    "xmin": ("pl_esd_xmin", lambda v, n: v / n),
    "num_pl_spikes": ("pl_n_tail", lambda v, n: v),
}
WW_COLUMNS = ("D", "M", "N", "Q", "alpha", "alpha_weighted", "entropy", "lambda_max", "log_alpha_norm",
              "log_norm", "log_spectral_norm", "matrix_rank", "norm", "num_pl_spikes", "rank_loss", "sigma",
              "spectral_norm", "stable_rank", "sv_max", "sv_min", "weak_rank_loss", "xmax", "xmin")


def sh(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def ensure_venvs(a):
    """Creates the peers' venvs under the cache once (re-runs find them)."""
    core = a.cache / "core312"
    if {"core", "core32"} & set(a.tools) and not (core / "bin/python").exists():
        sh([PY312, "-m", "venv", core])
        sh([core / "bin/python", "-m", "pip", "install", "--quiet", "diffract-core==0.3.1"])
    ww = Path(a.ww_python) if a.ww_python else a.cache / "ww/bin/python"
    if "ww" in a.tools and not ww.exists():
        if a.ww_python:
            sys.exit(f"--ww-python {ww}: not found")
        sh([sys.executable, "-m", "venv", a.cache / "ww"])
        # PyPI's torch wheel; its CUDA libraries are never loaded on a CPU-only run.
        sh([ww, "-m", "pip", "install", "--quiet", "torch", "weightwatcher==0.7.7"])
    return core / "bin/python", ww


def ensure_checkpoint(a):
    ckpt = a.cache / f"olmo2-1b-shapes-{a.gen_layers}layers-seed{a.seed}"
    if not (ckpt / "pretrained/model.safetensors").exists():
        shutil.rmtree(ckpt, ignore_errors=True)
        sh([a.diffract, "generate", "--out", ckpt, "--preset", "1b", "--layers", a.gen_layers,
            "--models", "pretrained", "--seed", a.seed])
    return ckpt / "pretrained"


def field_levels(diffract):
    out = subprocess.run([str(diffract), "metrics", "--json"], check=True, capture_output=True, text=True).stdout
    # name -> (level, default yes/no/vector), analyze's fields only
    return {f["name"]: (f["level"], f["default"]) for f in json.loads(out) if f["table"] == "metrics"}


def chosen_fields(a, levels):
    if a.fields == "values":
        return VALUES_FIELDS.split(",")
    if a.fields == "default":
        return [f for f, (level, default) in levels.items() if level == "PARAMETER" and default == "yes"]
    return [f for f in a.fields.split(",") if f]


def timed(cmd, threads, log):
    """Runs cmd as a child; returns (wall s, CPU s, peak RSS MiB) from its own rusage."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1")
    with open(log, "w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=err, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(map(str, cmd))}; see {log}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def tool_commands(a, ckpt, fields, work, threads, core_py, ww_py):
    par = ",".join(fields)

    def diffract(name, *extra):
        return [a.diffract, "analyze", ckpt, "--out", work / name, "--no-heads", "--match", a.match, "--metrics", par,
                "--min-fit-size", "0", "--convention", "weightwatcher", "--threads", threads, "--store",
                work / f"{name}.sqlite", "--quiet", *extra]

    def core(name, dtype):
        return [core_py, HERE / "run_diffract_core.py", ckpt, "--match", a.match, "--fields", par, "--dtype", dtype,
                "--out", work / f"{name}.json"]

    return {
        "diffract": diffract("diffract"),
        "diffract32": diffract("diffract32", "--precision", "f32"),
        "core": core("core", a.peer_dtype),
        "core32": core("core32", "f32"),
        "ww": [ww_py, HERE / "run_weightwatcher.py", ckpt, "--match", a.match, "--out", work / "ww.csv"]
        + (["--mp-fit"] if a.ww_mp_fit else []) + (["--randomize"] if a.ww_randomize else []),
    }


def rel(x, y):
    if math.isnan(x) and math.isnan(y):
        return 0.0
    if math.isnan(x) or math.isnan(y):
        return math.inf
    return abs(x - y) / max(abs(y), 1e-300) if y != 0 else abs(x)


def read_metrics(path):
    with open(path) as f:
        return {r["tensor"]: r for r in csv.DictReader(f)}


def worst(pairs):
    """pairs: (tensor, ours, theirs) -> (max relative difference, tensor at it)."""
    best = (0.0, "")
    for tensor, ours, theirs in pairs:
        d = rel(ours, theirs)
        if d > best[0] or not best[1]:
            best = (d, tensor)
    return best


def agreement(work, fields):
    ours = read_metrics(work / "diffract/metrics.csv")
    rows = []
    if (work / "core.json").exists():
        core = json.loads((work / "core.json").read_text())
        for f in fields:
            if f.startswith(RANDOM_PREFIXES) or "p_value" in f:
                continue
            pairs = [(t, float(ours[t][f]), v[f]) for t, v in core.items() if t in ours and f in v and f in ours[t]]
            if pairs:
                rows.append(("diffract-core", f, f, *worst(pairs), len(pairs)))
    if (work / "ww.csv").exists():
        with open(work / "ww.csv") as fh:
            ww = list(csv.DictReader(fh))
        with open(work / "diffract/weightwatcher.csv") as fh:
            ours_ww = {r["name"]: r for r in csv.DictReader(fh)}
        for col, (field, convert) in WW_TO_OURS.items():
            pairs = [(r["tensor"], float(ours[r["tensor"]][field]), convert(float(r[col]), float(r["N"])))
                     for r in ww if r["tensor"] in ours and field in ours[r["tensor"]]]
            if pairs:
                rows.append(("weightwatcher", col, field, *worst(pairs), len(pairs)))
        for col in WW_COLUMNS:
            pairs = [(r["tensor"], float(ours_ww[r["tensor"].removesuffix(".weight")][col]), float(r[col]))
                     for r in ww if r["tensor"].removesuffix(".weight") in ours_ww]
            if pairs:
                rows.append(("weightwatcher", col, f"weightwatcher.csv:{col}", *worst(pairs), len(pairs)))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", type=Path, default=Path("/work/peers-venv"), help="venvs and checkpoint")
    p.add_argument("--diffract", type=Path, default=ROOT / "build/diffract")
    p.add_argument("--ww-python", help="a Python with torch and weightwatcher 0.7.7 (default: a venv in --cache)")
    p.add_argument("--gen-layers", type=int, default=2, help="layers of the generated checkpoint")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", default="0", help="regex alternatives of the analysed layers, e.g. 0|1")
    p.add_argument("--roles", default=r"self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj",
                   help="regex of the analysed projections")
    p.add_argument("--fields", default="values", help="values, default (our default catalog) or a,b,c")
    p.add_argument("--skip-fields", default="",
                   help="regex of fields left out for every tool, e.g. '^(tpl|expon)_' (diffract-core's pure-Python "
                        "tpl/expon fits took 1400 s on one 2048x2048 matrix here)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--tools", default="diffract,core,ww")
    p.add_argument("--peer-dtype", choices=["f64", "f32"], default="f64",
                   help="arrays given to diffract-core (f64: the bf16 weights widened exactly, as diffract does)")
    p.add_argument("--ww-mp-fit", action="store_true")
    p.add_argument("--ww-randomize", action="store_true")
    p.add_argument("--keep", type=Path, help="keep the last run's outputs here")
    a = p.parse_args()
    a.cache = a.cache.resolve()
    if a.cache.is_relative_to(ROOT):
        sys.exit(f"--cache {a.cache}: must be outside the repository")
    a.tools = a.tools.split(",")
    a.match = rf"^model\.layers\.({a.layers})\.({a.roles})\.weight$"
    a.cache.mkdir(parents=True, exist_ok=True)

    core_py, ww_py = ensure_venvs(a)
    ckpt = ensure_checkpoint(a)
    levels = field_levels(a.diffract)
    fields = chosen_fields(a, levels)
    unknown = [f for f in fields if f not in levels]
    if unknown:
        sys.exit(f"--fields: unknown {','.join(unknown)}")
    fields = [f for f in fields if levels[f][0] == "PARAMETER" and not (a.skip_fields and re.search(a.skip_fields, f))]

    thread_counts = [int(t) for t in a.threads.split(",")]
    times = {(tool, t): [] for tool in a.tools for t in thread_counts}
    with tempfile.TemporaryDirectory(prefix="peers-", dir=a.cache) as tmp:
        for rep in range(a.reps):
            for t in thread_counts:
                for tool in a.tools:
                    work = Path(tmp) / f"r{rep}-t{t}"
                    work.mkdir(exist_ok=True)
                    cmd = tool_commands(a, ckpt, fields, work, t, core_py, ww_py)[tool]
                    wall, cpu, rss = timed(cmd, t, work / f"{tool}.log")
                    times[(tool, t)].append((wall, cpu, rss))
                    print(f"rep {rep} threads {t} {tool:8s} wall {wall:8.2f} s  cpu {cpu:8.2f} s  "
                          f"rss {rss:7.0f} MiB", file=sys.stderr, flush=True)
        last = Path(tmp) / f"r{a.reps - 1}-t{thread_counts[0]}"
        agree = agreement(last, fields) if "diffract" in a.tools else []
        if a.keep:
            shutil.copytree(last, a.keep, dirs_exist_ok=True)

    names = {"diffract": "diffract", "diffract32": "diffract --precision f32", "core": "diffract-core 0.3.1",
             "core32": "diffract-core 0.3.1 on f32 arrays", "ww": "WeightWatcher 0.7.7"}
    print(f"\nworkload: {ckpt}, tensors /{a.match}/, whole matrices, {len(fields)} fields ({a.fields}), "
          f"{a.reps} reps, medians\n")
    print("| tool | threads | wall s | CPU s | peak RSS MiB | wall / diffract's | wall / diffract f32's |")
    print("|---|---|---|---|---|---|---|")

    def median_wall(tool, t):
        return statistics.median(w for w, _, _ in times[(tool, t)]) if tool in a.tools else math.nan

    for t in thread_counts:
        base, base32 = median_wall("diffract", t), median_wall("diffract32", t)
        for tool in a.tools:
            w, c, r = (statistics.median(x[i] for x in times[(tool, t)]) for i in range(3))
            print(f"| {names[tool]} | {t} | {w:.2f} | {c:.2f} | {r:.0f} | {w / base:.2f}x | {w / base32:.2f}x |")
    if agree:
        print("\nAgreement (last rep, deterministic fields; max relative difference over matrices):\n")
        print("| peer | peer column | ours | max rel diff | at tensor | matrices |")
        print("|---|---|---|---|---|---|")
        for peer, col, ours, d, tensor, n in agree:
            print(f"| {peer} | {col} | {ours} | {d:.2g} | {tensor} | {n} |")


if __name__ == "__main__":
    main()
