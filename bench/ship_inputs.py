#!/usr/bin/env python3
"""What --ship-inputs costs against the computing, same run: one OLMo-2-1B-shaped layer (q/k/v/o 2048²,
gate/up 8192×2048, down 2048×8192, 16 heads, F32: 201 MiB) analysed by `mpirun -np 2`, rank 1 either
reading the inputs itself (a shared disk) or holding none (--ship-inputs: rank 0 sends it its share).
Reports, per mode, the wall time (best of --reps, interleaved) and, for --ship-inputs, rank 0's line:
the MiB sent and the seconds sending took, and what those bytes would take on 1 and 10 Gbit/s links.
Here both ranks share one machine (OpenMPI's shared-memory transport), so the sending time measured is a
floor; the link estimates are bytes / line rate.
Usage: python3 bench/ship_inputs.py [--reps 3] [--build build] [--dir D] [--metrics default]"""
import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--build", default="build")
ap.add_argument("--dir", default=None)
ap.add_argument("--metrics", default="default")
args = ap.parse_args()

from safetensors.numpy import save_file  # noqa: E402  (after the usage text)

hidden, heads, mlp = 2048, 16, 8192
root = Path(args.dir or tempfile.mkdtemp(prefix="ship-bench-"))
model = root / "rank0" / "model"
if not model.exists():
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "num_attention_heads": heads, "num_key_value_heads": heads, "intermediate_size": mlp,
        "num_hidden_layers": 1, "vocab_size": 256}))
    rng = np.random.default_rng(0)
    shapes = {"self_attn.q_proj": (hidden, hidden), "self_attn.k_proj": (hidden, hidden),
              "self_attn.v_proj": (hidden, hidden), "self_attn.o_proj": (hidden, hidden),
              "mlp.gate_proj": (mlp, hidden), "mlp.up_proj": (mlp, hidden), "mlp.down_proj": (hidden, mlp)}
    save_file({f"model.layers.0.{k}.weight": (0.02 * rng.standard_normal(s)).astype(np.float32)
               for k, s in shapes.items()}, str(model / "model.safetensors"))
(root / "rank1").mkdir(exist_ok=True)
shared = root / "shared.sh"  # both ranks in rank0/: one disk
shared.write_text(f'#!/bin/sh\ncd "{root}/rank0" && exec "$@"\n')
alone = root / "alone.sh"  # rank 1 in an empty directory: the inputs only on rank 0's host
alone.write_text(f'#!/bin/sh\ncd "{root}/rank$OMPI_COMM_WORLD_RANK" && exec "$@"\n')
for w in (shared, alone):
    w.chmod(0o755)
binary = str(Path(args.build).resolve() / "diffract")
mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--bind-to", "none"]


def once(wrapper, extra):
    for p in (root / "rank0" / "s.sqlite", root / "rank0" / "out"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    start = time.monotonic()
    p = subprocess.run([*mpirun, str(wrapper), binary, "analyze", "model", "--out", "out", "--store", "s.sqlite",
                        "--threads", "1", "--metrics", args.metrics, *extra], capture_output=True, text=True)
    took = time.monotonic() - start
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    return took, p.stderr


best = {"shared disk": [], "--ship-inputs": []}
sent = []
for _ in range(args.reps):
    best["shared disk"].append(once(shared, [])[0])
    took, err = once(alone, ["--ship-inputs"])
    best["--ship-inputs"].append(took)
    m = re.search(r"sent ([0-9.]+) MiB of inputs to 1 ranks in ([0-9.]+) s", err)
    sent.append((float(m.group(1)), float(m.group(2))))
for mode, times in best.items():
    print(f"{mode:14s} wall {min(times):7.2f} s (runs: {', '.join(f'{t:.2f}' for t in times)})")
mib, seconds = min(sent, key=lambda s: s[1])
print(f"sent {mib:.1f} MiB to rank 1 in {seconds:.2f} s here; at 1 Gbit/s {mib * 2**20 * 8 / 1e9:.2f} s, "
      f"at 10 Gbit/s {mib * 2**20 * 8 / 1e10:.2f} s, against a computing wall of {min(best['shared disk']):.2f} s")
print(f"ratio --ship-inputs / shared disk: {min(best['--ship-inputs']) / min(best['shared disk']):.3f}")
