"""Runs the reference library diffract-core on the matrices of a checkpoint; writes {tensor: {field: value}}.

Run with the Python 3.12 venv that bench/peers/run.py creates:
    PY312 run_diffract_core.py CHECKPOINT --match REGEX --fields a,b,c --out result.json
Fields diffract-core cannot produce (our additions, such as pl_status) are skipped and listed on stderr.
"""
import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkpoint_blocks import read_blocks  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("--match", required=True)
    p.add_argument("--fields", required=True)
    p.add_argument("--dtype", choices=["f64", "f32"], default="f64")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    from diffract import Session

    blocks = read_blocks(a.checkpoint, a.match, np.float64 if a.dtype == "f64" else np.float32)
    session = Session(profile="ram")
    with session:
        available = set(session.compute.list_available_metrics())
        wanted = [f for f in a.fields.split(",") if f]
        fields = [f for f in wanted if f in available]
        skipped = [f for f in wanted if f not in available]
        if skipped:
            print(f"diffract-core cannot produce: {','.join(skipped)}", file=sys.stderr)
        session.models.add(blocks, model_id="bench")
        session.compute.apply(*fields)
        exported = session.results.export_metrics(*fields, export_format="dict")
    rows = {}
    for entry in exported.values():
        values = {}
        for field, value in entry["fields"].items():
            if np.ndim(value) == 0:
                values[field] = float(value) if value is not None else math.nan
        rows[entry["metadata"]["name"]] = values
    Path(a.out).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
