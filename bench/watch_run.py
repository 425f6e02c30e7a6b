#!/usr/bin/env python3
"""`diffract watch` against one `diffract analyze` per checkpoint, same run: a run directory of N
checkpoints (step_<k·100>/, each one OLMo-2-1B-shaped layer — q/k/v/o 2048², gate/up 8192×2048, down
2048×8192, 16 heads — F32, the base plus a growing seeded perturbation), then
  analyze_each_s   N separate `diffract analyze` calls (one store), their summed wall time
  watch_s          one `diffract watch` over the run (another store, nothing reused)
  rewatch_s        the same watch again (every result in its store: only the content hashing)
and the ratios watch_s / analyze_each_s (the per-checkpoint overhead) and rewatch_s / watch_s.
Usage: python3 bench/watch_run.py [--checkpoints 20] [--roles attn_q,mlp_down] [--build build] [--dir D]"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--checkpoints", type=int, default=20)
ap.add_argument("--roles", default="attn_q,mlp_down")
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--build", default="build")
ap.add_argument("--dir", default=None)
args = ap.parse_args()

from safetensors.numpy import save_file  # noqa: E402  (after the usage text)

hidden, heads, mlp = 2048, 16, 8192
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
          "num_attention_heads": heads, "num_key_value_heads": heads, "intermediate_size": mlp,
          "num_hidden_layers": 1, "vocab_size": 256}
shapes = {"q_proj": (hidden, hidden), "k_proj": (hidden, hidden), "v_proj": (hidden, hidden),
          "o_proj": (hidden, hidden), "gate_proj": (mlp, hidden), "up_proj": (mlp, hidden),
          "down_proj": (hidden, mlp)}
root = Path(args.dir or tempfile.mkdtemp(prefix="watch-bench-"))
run_dir = root / "run"
if not run_dir.exists():
    rng = np.random.default_rng(0)
    base = {n: (rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[1])) for n, s in shapes.items()}
    noise = {n: rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[1]) for n, s in shapes.items()}
    for k in range(args.checkpoints):
        d = run_dir / f"step_{k * 100}"
        d.mkdir(parents=True)
        tensors = {f"model.layers.0.{'self_attn' if n.endswith(('q_proj', 'k_proj', 'v_proj', 'o_proj')) else 'mlp'}.{n}.weight":
                   (w + 0.02 * k * noise[n]).astype(np.float32) for n, w in base.items()}
        save_file(tensors, str(d / "model.safetensors"))
        (d / "config.json").write_text(json.dumps(config))

diffract = f"{args.build}/diffract"
common = ["--roles", args.roles, "--threads", str(args.threads), "--quiet"]


def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


for s in ("each.sqlite", "watch.sqlite"):
    (root / s).unlink(missing_ok=True)
shutil.rmtree(root / "out", ignore_errors=True)
each = sum(timed([diffract, "analyze", d, "--out", root / "out" / d.name, "--store", root / "each.sqlite", *common])
           for d in sorted(run_dir.iterdir()))
watch = timed([diffract, "watch", run_dir, "--out", root / "out" / "watch", "--store", root / "watch.sqlite",
               "--settle", "0", *common])
rewatch = timed([diffract, "watch", run_dir, "--out", root / "out" / "watch", "--store", root / "watch.sqlite",
                 "--settle", "0", *common])
print(json.dumps({"checkpoints": args.checkpoints, "roles": args.roles, "analyze_each_s": round(each, 2),
                  "watch_s": round(watch, 2), "rewatch_s": round(rewatch, 3),
                  "watch_over_analyze_each": round(watch / each, 4), "rewatch_over_watch": round(rewatch / watch, 4),
                  "dir": str(root)}, indent=1))
