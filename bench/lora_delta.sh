#!/usr/bin/env bash
# compare --delta-only of a base with a LoRA adapter on it (issue 14 §4): a Q/K/V/O adapter of rank R
# (default 16) on every layer of a synthetic checkpoint (default: the 7B preset, 14 GB in bf16), timed
# cold (a fresh store: every byte of the base is hashed once) and re-run (everything reused), with
# /usr/bin/time's wall and peak RSS.  Usage: bench/lora_delta.sh WORKDIR [PRESET] [RANK]
set -euo pipefail
work=$1 preset=${2:-7b} rank=${3:-16}
bin=$(cd "$(dirname "$0")/.." && pwd)/build/diffract
mkdir -p "$work" && cd "$work"
[ -d fam/pretrained ] || "$bin" generate --preset "$preset" --models pretrained --out fam
rm -rf adapter out-* store.sqlite
python3 - "$rank" <<'PY'
import json, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import save_file
r = int(sys.argv[1])
cfg = json.loads(Path("fam/pretrained/config.json").read_text())
E, L = cfg["hidden_size"], cfg["num_hidden_layers"]
rng = np.random.default_rng(0)
t = {}
for i in range(L):
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        m = f"base_model.model.model.layers.{i}.self_attn.{proj}"
        t[m + ".lora_A.weight"] = (rng.normal(size=(r, E)) / np.sqrt(E)).astype(np.float32)
        t[m + ".lora_B.weight"] = (rng.normal(size=(E, r)) * 1e-2).astype(np.float32)
Path("adapter").mkdir()
save_file(t, "adapter/adapter_model.safetensors")
Path("adapter/adapter_config.json").write_text(json.dumps({
    "peft_type": "LORA", "base_model_name_or_path": str(Path("fam/pretrained").resolve()), "r": r,
    "lora_alpha": 2 * r, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}))
PY
for run in cold rerun; do
  /usr/bin/time -f "$run: %e s wall, %M KB peak RSS" "$bin" compare --base fam/pretrained fam/pretrained+adapter \
    --delta-only --out "out-$run" --store store.sqlite --threads "$(nproc)" 2>&1 | grep -E "^(compare|cold|rerun)"
done
