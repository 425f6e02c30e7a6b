"""Runs WeightWatcher 0.7.7's analyze() on the matrices of a checkpoint; writes its details as CSV.

WeightWatcher takes a torch model, so each matrix becomes the weight of a bias-free Linear layer (f32:
bf16 weights are exact in f32; WeightWatcher decomposes W.astype(float), i.e. in f64). Run with a Python
that has torch and weightwatcher (the venv bench/peers/run.py makes, or --ww-python):
    PY run_weightwatcher.py CHECKPOINT --match REGEX --out details.csv [--mp-fit] [--randomize]
"""
import argparse
import contextlib
import io
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkpoint_blocks import read_blocks  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("--match", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--mp-fit", action="store_true", help="also WeightWatcher's Marchenko-Pastur fit")
    p.add_argument("--randomize", action="store_true", help="also WeightWatcher's randomized-ESD fields")
    a = p.parse_args()

    import torch
    import weightwatcher as ww

    logging.disable(logging.WARNING)
    blocks = read_blocks(a.checkpoint, a.match, np.float32)
    names = list(blocks)
    layers = []
    for name in names:
        w = blocks.pop(name)
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
        layers.append(lin)
    model = torch.nn.Sequential(*layers)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        details = ww.WeightWatcher(model=model).analyze(mp_fit=a.mp_fit, randomize=a.randomize)
    details = details.sort_values("layer_id").reset_index(drop=True)
    details.insert(1, "tensor", [names[i] for i in range(len(details))])
    details.to_csv(a.out, index=False, float_format="%.17g")


if __name__ == "__main__":
    main()
