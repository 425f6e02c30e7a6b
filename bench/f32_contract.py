#!/usr/bin/env python3
"""The f32 tier's accuracy against f32 sgesdd, field by field (the table in docs/metrics.md, "The f32
tier's contract"): the largest relative error over the rows, against f64 dgesdd, of `--precision f32`
and of `--precision f32 --svd-route gesdd` (f32 LAPACK sgesdd), for analyze --metrics all on a real BERT
(all-MiniLM-L6-v2) and the demo family, compare on the demo family, and analyze and compare on a
1B-shaped layer (tests/python/test_f32_contract.py's inputs). Fields where both are exact are left out.
Usage: python3 bench/f32_contract.py [--build build]"""
import argparse
import sys
import tempfile
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
args = ap.parse_args()

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import numpy as np  # noqa: E402
from f32_contract import measure, table_lines, violations  # noqa: E402
from test_f32_contract import MINILM, one_b_layer  # noqa: E402

binary = str(Path(args.build).resolve() / "diffract")
work = Path(tempfile.mkdtemp(prefix="f32-contract-"))
import subprocess  # noqa: E402
subprocess.run([binary, "generate", "--out", str(work / "fam")], check=True, capture_output=True)
rng = np.random.default_rng(36)
base = one_b_layer(work / "pre", rng)
one_b_layer(work / "ft", rng, base)
cases = [
    ("MiniLM analyze", "analyze", "metrics.csv", [MINILM, "--metrics", "all", "--exclude", "position_ids"]),
    ("demo analyze", "analyze", "metrics.csv", [work / "fam" / "math", "--metrics", "all"]),
    ("demo compare", "compare", "compare.csv", ["--base", work / "fam" / "pretrained", work / "fam" / "math"]),
    ("1B-layer analyze", "analyze", "metrics.csv", [work / "ft"]),
    ("1B-layer compare", "compare", "compare.csv", ["--base", work / "pre", work / "ft"]),
]
for i, (title, command, table, a) in enumerate(cases):
    errors = measure(binary, command, work / f"case{i}", table, *a)
    print("\n".join(table_lines(title, errors)))
    print(f"violations: {violations(errors) or 'none'}\n")
