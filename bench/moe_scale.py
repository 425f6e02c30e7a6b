#!/usr/bin/env python3
"""Mixture-of-experts at scale (issue 47, item 6): do a layer's many small expert matrices run at the dense
route's flop rate, does --max-memory hold, and how long would the whole of DeepSeek-V3 take?

1. A Qwen3-30B-A3B-shaped MoE layer (hidden 2048, experts 768 wide, stored packed as transformers v5
   writes it: gate_up_proj [E, 1536, 2048], down_proj [E, 2048, 768], BF16; --experts of the 128 are
   written, default 32) against a dense OLMo-2-1B-shaped layer (q/k/v/o 2048², gate/up 8192×2048, down
   2048×8192, BF16), both `analyze --no-heads` (default metrics, a fresh store each run), best of --reps.
   The cost of a matrix m×n (M = max, N = min) is counted as its Gram product and eigendecomposition,
   2·M·N² + 9·N³ flops; the bench prints each layer's seconds per Gflop and their ratio (target: the
   experts within 1.25 of the dense layer's), the peak RSS of a run under --max-memory, and the projected
   time of the whole 48-layer, 128-expert model.
2. One DeepSeek-V3-shaped layer in block FP8 (128×128 weight_scale_inv, as DeepSeek ships it): MLA
   (q_a 1536×7168, q_b 24576×1536, kv_a_proj_with_mqa 576×7168, kv_b 32768×512, o 7168×16384, 128 heads
   split) and --ds-experts of the 256 routed experts (2048 × 7168), at one thread and at all cores. From the
   measured seconds per Gflop it projects the whole 671B model (61 layers: 3 dense with 18432-wide MLPs,
   58 with 256 routed + 1 shared expert, MLA everywhere, embeddings and head 129280×7168) on this machine,
   on 16 cores (the parallel efficiency measured from 1 thread to all cores here, held) and on 8 MPI hosts
   of 16 cores (the layers split evenly, each host reading its own shards).

Usage: python3 bench/moe_scale.py [--reps 2] [--experts 32] [--ds-experts 4] [--build build]"""
import argparse
import json
import os
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
ap.add_argument("--reps", type=int, default=2)
ap.add_argument("--experts", type=int, default=32, help="experts of the 30B-A3B layer written (of 128)")
ap.add_argument("--ds-experts", type=int, default=4, help="experts of the DeepSeek-V3 layer written (of 256)")
ap.add_argument("--max-memory", default="1G")
ap.add_argument("--build", default="build")
args = ap.parse_args()
binary = str(Path(args.build).resolve() / "diffract")
root = Path(tempfile.mkdtemp(prefix="moe-bench-"))
rng = np.random.default_rng(0)
BF16 = qf.ml_dtypes.bfloat16


def gflops(m, n):
    M, N = max(m, n), min(m, n)
    return (2.0 * M * N * N + 9.0 * N ** 3) / 1e9


def normal(shape, scale=0.02):
    return (rng.standard_normal(shape, dtype=np.float32) * scale)


def write(d, tensors, config):
    d.mkdir()
    qf.write_safetensors(d / "model.safetensors", tensors)
    (d / "config.json").write_text(json.dumps(config))


def analyze(model, threads, extra=()):
    """Seconds and peak RSS (MiB) of one `analyze` run with a fresh store."""
    store, out = root / "s.sqlite", root / "out"
    store.unlink(missing_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    p = subprocess.Popen([binary, "analyze", model, "--out", out, "--store", store, "--threads", str(threads),
                          "--no-heads", "--quiet", "--quiet", *extra])
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"analyze {model} failed ({status})")
    return dt, usage.ru_maxrss / 1024


def best(model, threads, extra=()):
    return min(analyze(model, threads, extra)[0] for _ in range(args.reps))


# --- 1. Qwen3-30B-A3B-shaped MoE layer against a dense 1B layer --------------------------------------
H, I, E = 2048, 768, args.experts
moe = {"model.layers.0.mlp.experts.gate_up_proj": qf.plain(normal((E, 2 * I, H)).astype(BF16)),
       "model.layers.0.mlp.experts.down_proj": qf.plain(normal((E, H, I)).astype(BF16))}
write(root / "moe", moe, {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": H,
                          "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                          "num_hidden_layers": 48, "moe_intermediate_size": I, "num_experts": 128})
moe_gflops = E * (2 * gflops(I, H) + gflops(H, I))
dense_shapes = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (H, H), "self_attn.v_proj": (H, H),
                "self_attn.o_proj": (H, H), "mlp.gate_proj": (8192, H), "mlp.up_proj": (8192, H),
                "mlp.down_proj": (H, 8192)}
write(root / "dense", {f"model.layers.0.{k}.weight": qf.plain(normal(s).astype(BF16)) for k, s in dense_shapes.items()},
      {"model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"], "hidden_size": H, "num_attention_heads": 16,
       "num_hidden_layers": 16, "intermediate_size": 8192})
dense_gflops = sum(gflops(*s) for s in dense_shapes.values())
times = {}
for threads in (1, 0):
    for name in ("dense", "moe"):
        times[(name, threads)] = best(root / name, threads)
print(f"1. Qwen3-30B-A3B-shaped layer ({E} of 128 experts, BF16 packed) vs a dense OLMo-2-1B layer, "
      f"analyze --no-heads, best of {args.reps}:")
for threads in (1, 0):
    d, m = times[("dense", threads)] / dense_gflops, times[("moe", threads)] / moe_gflops
    print(f"   threads={threads or 'all'}: dense {times[('dense', threads)]:.2f} s ({d * 1e3:.2f} ms/Gflop), "
          f"experts {times[('moe', threads)]:.2f} s ({m * 1e3:.2f} ms/Gflop), ratio {m / d:.3f}")
_, rss = analyze(root / "moe", 0, ("--max-memory", args.max_memory))
print(f"   peak RSS under --max-memory {args.max_memory}: {rss:.0f} MiB (packed tensors mapped, read per expert)")
per_layer = 128 * (2 * gflops(I, H) + gflops(H, I)) + 2 * gflops(H, 4096) + 2 * gflops(512, H)
whole = 48 * per_layer * times[("moe", 0)] / moe_gflops
print(f"   projected whole 30B-A3B (48 layers × 128 experts + attention), all cores here: {whole / 60:.1f} min")
shutil.rmtree(root / "moe")
shutil.rmtree(root / "dense")

# --- 2. One DeepSeek-V3-shaped layer in block FP8, projected to the whole model -----------------------
H, MI, NE = 7168, 2048, args.ds_experts
mla = {"self_attn.q_a_proj": (1536, H), "self_attn.q_b_proj": (128 * 192, 1536),
       "self_attn.kv_a_proj_with_mqa": (576, H), "self_attn.kv_b_proj": (128 * 256, 512),
       "self_attn.o_proj": (H, 128 * 128)}
experts = {}
for e in range(NE):
    experts.update({f"mlp.experts.{e}.gate_proj": (MI, H), f"mlp.experts.{e}.up_proj": (MI, H),
                    f"mlp.experts.{e}.down_proj": (H, MI)})
tensors = {}
for k, s in {**mla, **experts}.items():
    tensors.update(qf.fp8(f"model.layers.3.{k}.weight", normal(s).astype(np.float64), rng, per="block",
                          block=(128, 128), scale_suffix="_scale_inv")[0])
ds_cfg = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": H,
          "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
          "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "num_hidden_layers": 61,
          "moe_intermediate_size": MI, "n_routed_experts": 256, "n_shared_experts": 1,
          "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                                  "activation_scheme": "dynamic"}}
write(root / "ds", tensors, ds_cfg)
del tensors
ds_gflops = sum(gflops(*s) for s in {**mla, **experts}.values())
ds = {threads: best(root / "ds", threads) for threads in (1, 0)}
rate = {t: ds[t] / ds_gflops for t in ds}  # seconds per Gflop
print(f"2. DeepSeek-V3-shaped layer (block FP8; MLA + {NE} of 256 experts), analyze --no-heads, best of {args.reps}:")
for t in (1, 0):
    print(f"   threads={t or 'all'}: {ds[t]:.2f} s, {rate[t] * 1e3:.2f} ms/Gflop")
mla_g = sum(gflops(*s) for s in mla.values())
expert_g = 2 * gflops(MI, H) + gflops(H, MI)
dense_mlp_g = 2 * gflops(18432, H) + gflops(H, 18432)
model_g = 61 * mla_g + 58 * 257 * expert_g + 3 * dense_mlp_g + 2 * gflops(129280, H)
cores = os.cpu_count() or 1
speedup = ds[1] / ds[0]
efficiency = speedup / cores
here = model_g * rate[0]
on16 = model_g * rate[1] / (16 * efficiency)
print(f"   whole DeepSeek-V3 671B ({model_g / 1e3:.0f} Tflop of SVD work): this machine ({cores} cores) "
      f"{here / 3600:.1f} h; 16 cores (parallel efficiency {efficiency:.2f} held) {on16 / 3600:.2f} h; "
      f"8 MPI hosts × 16 cores {on16 / 8 / 60:.1f} min")
shutil.rmtree(root)
