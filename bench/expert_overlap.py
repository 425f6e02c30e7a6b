#!/usr/bin/env python3
"""What expert_overlap.csv costs (issue 48 item 3): compare with and without --overlap-k on a
Qwen3-30B-A3B-shaped MoE layer (hidden 2048, experts 768 wide, stored packed as transformers v5 writes it:
gate_up_proj [E, 1536, 2048], down_proj [E, 2048, 768], BF16; --experts of the 128 written, default 8) and
a model whose experts moved by 1 % of their scale. Each run starts from a fresh store (compare's own
results are not reused, the overlaps never are), best of --reps, at --threads (default all cores). Prints
both wall times and CPU times (user + system of the child, steadier than wall time on a shared machine)
and their ratios. The overlap's own cost: per expert and model two Gram products (1536² × 2048
and 768² × 2048) and their top-k eigenpairs (dsyevr); the pairs are k × k products.

Usage: python3 bench/expert_overlap.py [--experts 8] [--reps 2] [--k 8] [--threads 0] [--build build]"""
import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

ap = argparse.ArgumentParser()
ap.add_argument("--experts", type=int, default=8)
ap.add_argument("--reps", type=int, default=2)
ap.add_argument("--k", type=int, default=8)
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--build", default="build")
args = ap.parse_args()
binary = str(Path(args.build).resolve() / "diffract")
root = Path(tempfile.mkdtemp(prefix="overlap-bench-"))
rng = np.random.default_rng(0)
E, H, I = args.experts, 2048, 768
config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": H,
          "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 1,
          "moe_intermediate_size": I, "num_experts": E}
prefix = "model.layers.0.mlp."
base = {prefix + "experts.gate_up_proj": 0.02 * rng.standard_normal((E, 2 * I, H), dtype=np.float32),
        prefix + "experts.down_proj": 0.02 * rng.standard_normal((E, H, I), dtype=np.float32),
        prefix + "gate.weight": 0.02 * rng.standard_normal((E, H), dtype=np.float32)}


def write(name, tensors):
    d = root / name
    d.mkdir()
    save_file({k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(config))
    return d


d_base = write("base", base)
d_model = write("model", {k: v + 0.0002 * rng.standard_normal(v.shape, dtype=np.float32) for k, v in base.items()})


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(k):
    """(wall, cpu) seconds, each the best of --reps."""
    wall = cpu = float("inf")
    for rep in range(args.reps):
        store, out = root / f"s-{k}-{rep}.sqlite", root / f"out-{k}-{rep}"
        t, c = time.perf_counter(), cpu_seconds()
        subprocess.run([binary, "compare", "--base", d_base, d_model, "--out", out, "--store", store, "--quiet",
                        "--no-heads", "--overlap-k", str(k), "--threads", str(args.threads)], check=True)
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, cpu_seconds() - c)
        assert (out / "expert_overlap.csv").exists() == (k > 0)
    return wall, cpu


try:
    (w0, c0), (w1, c1) = timed(0), timed(args.k)
    print(f"{E} experts of a 30B-A3B layer, BF16, threads {args.threads or 'all'}: compare {w0:.2f} s wall "
          f"({c0:.2f} s CPU), with --overlap-k {args.k} {w1:.2f} s ({c1:.2f} s CPU): ratio {w1 / w0:.2f} wall, "
          f"{c1 / c0:.2f} CPU (the overlap stage {(c1 - c0) / E:.3f} CPU s per expert)")
finally:
    shutil.rmtree(root, ignore_errors=True)
