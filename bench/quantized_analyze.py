#!/usr/bin/env python3
"""Is decoding a quantized checkpoint the bottleneck? One OLMo-2-1B-shaped layer (q/k/v/o 2048², GQA
k/v 512×2048, gate/up 8192×2048, down 2048×8192) stored three ways — BF16, FP8 with 128×128 block
scales (transformers fine-grained), GPTQ int4 group 128 — analysed by `diffract analyze` (default
metrics, heads split, a fresh store each run) at one thread and at all cores, interleaved, best of
--reps. Prints each time and its ratio to BF16's at the same thread count (issue 46: within 1.10).
Usage: python3 bench/quantized_analyze.py [--reps 3] [--build build] [--metrics default]"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import quantized_fixtures as qf  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--build", default="build")
ap.add_argument("--metrics", default="default")
args = ap.parse_args()

hidden, heads, kv, mlp = 2048, 32, 8, 8192
shapes = {"self_attn.q_proj": (hidden, hidden), "self_attn.k_proj": (kv * 64, hidden),
          "self_attn.v_proj": (kv * 64, hidden), "self_attn.o_proj": (hidden, hidden),
          "mlp.gate_proj": (mlp, hidden), "mlp.up_proj": (mlp, hidden), "mlp.down_proj": (hidden, mlp)}
root = Path(tempfile.mkdtemp(prefix="quant-bench-"))
rng = np.random.default_rng(0)
weights = {f"model.layers.0.{k}.weight": (rng.standard_normal(s) * 0.02).astype(np.float32) for k, s in shapes.items()}
base_cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 64, "intermediate_size": mlp,
            "num_hidden_layers": 1, "vocab_size": 256}
formats = {
    "bf16": (None, lambda n, w: ({n: qf.plain(w.astype(qf.ml_dtypes.bfloat16))}, None)),
    "fp8-block128": ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
                     lambda n, w: qf.fp8(n, w, rng, per="block", block=(128, 128), scale_suffix="_scale_inv")),
    "gptq-int4-g128": ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False},
                       lambda n, w: qf.gptq(n[: -len(".weight")], w, rng, bits=4, group=128)),
}
for name, (quant, encode) in formats.items():
    d = root / name
    d.mkdir()
    tensors = {}
    for n, w in weights.items():
        tensors.update(encode(n, w.astype(np.float64))[0])
    qf.write_safetensors(d / "model.safetensors", tensors)
    (d / "config.json").write_text(json.dumps({**base_cfg, **({"quantization_config": quant} if quant else {})}))

binary = str(Path(args.build) / "diffract")
best = {}
for rep in range(args.reps):
    for threads in (1, 0):
        for name in formats:
            store = root / "s.sqlite"
            store.unlink(missing_ok=True)
            out = root / "out"
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            subprocess.run([binary, "analyze", root / name, "--out", out, "--store", store, "--threads", str(threads),
                            "--metrics", args.metrics, "--quiet", "--quiet"], check=True)
            dt = time.perf_counter() - t0
            key = (threads, name)
            best[key] = min(best.get(key, dt), dt)
for threads in (1, 0):
    ref = best[(threads, "bf16")]
    for name in formats:
        t = best[(threads, name)]
        print(f"threads={threads or 'all'} {name:16s} {t:8.2f} s  ratio to bf16 {t / ref:.3f}")
shutil.rmtree(root)
