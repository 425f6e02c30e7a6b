#!/usr/bin/env python3
"""Prints README.md's Layout block from the tree: the layers in CMakeLists.txt's DIFFRACT_LAYERS order
with the layers each one uses, then the top-level directories. tests/python/test_readme_layout.py
fails when the README's block differs from this output (run this and paste it) or when a layer or a
directory has no description here."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = {
    "core": "dtypes, mapped files, matrices, RE2 patterns, progress, cancel, atomic files",
    "model": "tensor roles, head geometry, architecture schemas",
    "formats": "safetensors, PyTorch .bin, GGUF, LoRA adapters, HF cache; writers; formats::align",
    "linalg": "the backend: SVDs, Gram products (cpu; cuda or its stub)",
    "analysis": "metric catalog and kernels, fits, matrix plans, head statistics and ranking",
    "store": "the results store (SQLite)",
    "edit": "edited checkpoints: rewind, truncate, transplant, permute, interpolate, merge, LoRA",
    "synth": "the synthetic family with planted heads",
    "run": "jobs: analyze, compare (plan, tasks, rows), rewind; content ids, scheduler, MPI",
    "sweep": "evaluated sweeps: candidates, evaluators, journal",
    "watch": "a training run's checkpoints over steps: discovery, trends, alerts",
    "report": "figures and the HTML page",
}
DIRECTORIES = [
    ("cli/", "the `diffract` program: main.cpp (the single catch site) + one file per command"),
    ("python/", "nanobind bindings (python/src) and the package diffract_spectral (python/diffract_spectral)"),
    ("tests/unit", "GoogleTest; tests/python: pytest against numpy/scipy/powerlaw/safetensors/gguf/peers"),
    ("tests/fuzz", "libFuzzer targets and seed corpora, replayed by a unit test (tests/fuzz/README.md)"),
    ("tests/consumer", "a project using the installed C++ API (find_package(diffract))"),
    ("bench/", "benchmarks (bench/README.md)"),
    ("docs/", "formats, metrics, decisions; docs/architecture.md walks a command through the layers"),
    ("scripts/", "setup, build, test, demo, wheel, fuzzing"),
    ("examples/", "a walk through the Python API, notebook style; a watched Trainer run"),
]


def layers():
    text = (ROOT / "CMakeLists.txt").read_text()
    block = re.search(r"set\(DIFFRACT_LAYERS\n(.*?)\)", text, re.S).group(1)
    return [re.findall(r"[a-z]+", line) for line in block.splitlines() if line.strip()]


def layout() -> str:
    lines = ["include/diffract/   public headers, one directory per layer; src/ mirrors it. Each layer uses",
             "                    only those after its arrow (CMakeLists.txt's DIFFRACT_LAYERS):"]
    for name, *uses in layers():
        if name not in LAYERS:
            sys.exit(f"readme_layout.py: layer '{name}' has no description")
        lines.append(f"  {name:<9} ← {' '.join(uses) or '(nothing of ours)'}")
        lines.append(f"  {'':<11}{LAYERS[name]}")
    for path, note in DIRECTORIES:
        if not (ROOT / path).exists():
            sys.exit(f"readme_layout.py: {path} does not exist")
        lines.append(f"{path:<20}{note}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(layout())
