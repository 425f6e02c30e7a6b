"""The accuracy contract of --precision f32 (issue 36; docs/metrics.md, "The f32 tier's contract"), as a
measurement shared by tests/python/test_f32_contract.py and bench/f32_contract.py: for every numeric field
of a table, the largest relative error over its rows of

  ours:   --precision f32                     (our f32 tier)
  sgesdd: --precision f32 --svd-route gesdd   (f32 LAPACK sgesdd: what the reference's GPU path, f32
                                               torch.linalg.svd, computes; values and vectors)

against f64 LAPACK dgesdd on the same inputs (--precision f64 --svd-route gesdd). The contract: ours ≤ sgesdd + MARGIN, field by field."""
import csv
import math
import shutil
import subprocess
from pathlib import Path

# Two f32 ulps of relative error: where sgesdd happens to be exact (a sum it rounds favourably), ours may
# still carry f32's own rounding.
MARGIN = 2 * 2.0**-23

# Columns that name a row, not a value.
KEYS = ("model", "tensor", "role", "layer", "head", "kind")


def rows(path):
    with open(path) as f:
        return {tuple(r.get(k, "") for k in KEYS): r for r in csv.DictReader(f)}


def relative_error(ref, got):
    try:
        a, b = float(ref), float(got)
    except ValueError:  # a status name: equal or not
        return 0.0 if ref == got else math.inf
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return math.inf
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def field_errors(ref_table, table):
    """field -> the largest relative error over the rows, of `table` against `ref_table`."""
    ref, got = rows(ref_table), rows(table)
    assert ref.keys() == got.keys(), "the runs planned other rows"
    out = {}
    for key, r in ref.items():
        for field, value in r.items():
            if field in KEYS or field in ("rows", "cols", "model_name", "precision"):  # labels, not values
                continue
            out[field] = max(out.get(field, 0.0), relative_error(value, got[key][field]))
    return out


def measure(binary, command, out, table, *args):
    """{'ours': errors, 'sgesdd': errors} of `command args` (analyze or compare) against its f64 run."""
    runs = {"f64": ["--precision", "f64", "--svd-route", "gesdd"], "ours": ["--precision", "f32"],
            "sgesdd": ["--precision", "f32", "--svd-route", "gesdd"]}
    for name, flags in runs.items():
        shutil.rmtree(out / name, ignore_errors=True)
        subprocess.run([binary, command, *map(str, args), *flags, "--out", str(out / name), "--store",
                        str(out / f"{name}.sqlite"), "--quiet", "--quiet"], check=True, capture_output=True,
                       text=True)
    return {name: field_errors(out / "f64" / table, out / name / table) for name in ("ours", "sgesdd")}


def violations(errors):
    """The fields where ours exceeds sgesdd + MARGIN: [(field, ours, sgesdd)]."""
    return [(f, e, errors["sgesdd"][f]) for f, e in sorted(errors["ours"].items())
            if e > errors["sgesdd"][f] + MARGIN]


def table_lines(title, errors):
    lines = [f"| {title} | ours (`--precision f32`) | f32 `sgesdd` |", "|---|---|---|"]
    for f, e in sorted(errors["ours"].items()):
        s = errors["sgesdd"][f]
        if e == 0 and s == 0:
            continue
        lines.append(f"| `{f}` | {e:.1e} | {s:.1e} |")
    return lines
