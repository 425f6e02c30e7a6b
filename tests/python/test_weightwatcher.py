"""`analyze --convention weightwatcher` against WeightWatcher 0.7.7 itself: a committed fixture of its
analyze() output (tests/fixtures/weightwatcher/details.csv, made by tests/tools/make_weightwatcher_fixture.py
with torch) on the matrices of tests/fixtures/weightwatcher/matrices.py, regenerated here with numpy only.
When weightwatcher and torch are importable, the comparison is also run live."""
import csv
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "weightwatcher"
sys.path.insert(0, str(FIXTURE))
from matrices import matrices  # noqa: E402

st = pytest.importorskip("safetensors.numpy")

# Tolerances: WeightWatcher decomposes W.astype(float) in f64 as we do, and our power-law fit equals
# powerlaw's to ~1e-13 (docs/metrics_fits.md). Measured worst: 6e-14 (alpha_weighted, log_spectral_norm),
# sv_min 5.7e-10 relative on the rank-deficient matrix (a singular value of 6e-9, rounding of the SVD).
RTOL = {"sv_min": 1e-6}
DEFAULT_RTOL = 1e-12
EXACT = {"M", "N", "Q", "matrix_rank", "num_evals", "num_pl_spikes", "rank_loss", "weak_rank_loss"}


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    root = tmp_path_factory.mktemp("ww")
    d = root / "model"
    d.mkdir()
    st.save_file({f"{name}.weight": w for name, w in matrices()}, str(d / "model.safetensors"))
    out = root / "out"
    run(["analyze", d, "--out", out, "--store", root / "s.sqlite", "--quiet", "--no-heads", "--convention",
         "weightwatcher"])
    return {r["name"]: r for r in csv.DictReader(open(out / "weightwatcher.csv"))}


def compare(ours, theirs_rows):
    checked = 0
    for theirs in theirs_rows:
        mine = ours[theirs["matrix"]]
        for col, value in theirs.items():
            if col not in mine or col in ("name", "layer_id"):
                continue
            if col in ("status", "warning"):
                assert mine[col] == value, (theirs["matrix"], col)
                continue
            a, b = float(mine[col]), float(value)
            if col in EXACT:
                assert a == b, (theirs["matrix"], col, a, b)
            else:
                assert math.isclose(a, b, rel_tol=RTOL.get(col, DEFAULT_RTOL), abs_tol=1e-12), \
                    (theirs["matrix"], col, a, b)
            checked += 1
    return checked


def test_matches_committed_weightwatcher_fixture(ours):
    theirs = list(csv.DictReader(open(FIXTURE / "details.csv")))
    assert len(theirs) == len(matrices()) == len(ours)
    assert compare(ours, theirs) >= 20 * len(theirs)
    # The layer naming: the tensor name without ".weight", one row per whole matrix, numbered in our order
    # (the checkpoint's tensor order; WeightWatcher numbers torch modules).
    assert sorted(r["name"] for r in ours.values()) == sorted(name for name, _ in matrices())
    assert [int(r["layer_id"]) for r in ours.values()] == list(range(len(theirs)))


def test_columns_follow_weightwatcher_definitions(ours):
    """Independent of WeightWatcher: its formulas on numpy's SVD."""
    for name, w in matrices():
        r = ours[name]
        s = np.linalg.svd(w.astype(np.float64), compute_uv=False)
        ev = s ** 2
        assert math.isclose(float(r["norm"]), ev.sum(), rel_tol=1e-12)
        assert math.isclose(float(r["lambda_max"]), ev.max(), rel_tol=1e-12)
        assert math.isclose(float(r["log_spectral_norm"]), np.log10(ev.max()), rel_tol=1e-12, abs_tol=1e-14)
        assert int(float(r["matrix_rank"])) == np.linalg.matrix_rank(w.astype(np.float64))  # as WeightWatcher
        a = float(r["alpha"])
        assert math.isclose(float(r["log_alpha_norm"]), np.log10(np.sum(ev ** a)), rel_tol=1e-10)
        assert math.isclose(float(r["alpha_weighted"]), a * np.log10(ev.max()), rel_tol=1e-10, abs_tol=1e-14)


@pytest.mark.skipif(importlib.util.find_spec("weightwatcher") is None or importlib.util.find_spec("torch") is None,
                    reason="weightwatcher and torch not importable (the fixture test covers it)")
def test_matches_weightwatcher_live(ours, tmp_path):
    import subprocess
    live = tmp_path / "details.csv"
    subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "make_weightwatcher_fixture.py"), str(live)],
                   check=True)
    theirs = list(csv.DictReader(open(live)))
    assert compare(ours, theirs) > 0


def test_convention_is_validated_and_default_writes_no_weightwatcher_csv(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    st.save_file({f"{name}.weight": w for name, w in matrices()[:1]}, str(d / "model.safetensors"))
    p = run(["analyze", d, "--out", tmp_path / "x", "--store", tmp_path / "s.sqlite", "--convention", "ww"],
            check=False)
    assert p.returncode == 2 and "--convention" in p.stderr and "'ww'" in p.stderr
    run(["analyze", d, "--out", tmp_path / "plain", "--store", tmp_path / "s.sqlite", "--quiet"])
    assert sorted(f.name for f in (tmp_path / "plain").iterdir()) == ["aggregates.csv", "metrics.csv"]


def test_writes_the_layers_weightwatcher_analyses(tmp_path):
    """WeightWatcher 0.7.7's defaults skip layers with fewer than 8 eigenvalues or a longer side over
    50000; weightwatcher.csv writes the same layers (so its means are get_summary's), metrics.csv all."""
    rng = np.random.default_rng(3)
    shapes = {"few.weight": (7, 64), "eight.weight": (8, 64), "wide.weight": (8, 50001), "dense.weight": (64, 64)}
    d = tmp_path / "model"
    d.mkdir()
    st.save_file({k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}, str(d / "model.safetensors"))
    out = tmp_path / "out"
    run(["analyze", d, "--out", out, "--store", tmp_path / "s.sqlite", "--quiet", "--no-heads", "--convention",
         "weightwatcher", "--metrics", "pl_alpha"])
    written = [r["name"] for r in csv.DictReader(open(out / "weightwatcher.csv"))]
    assert sorted(written) == ["dense", "eight"]
    assert [int(r["layer_id"]) for r in csv.DictReader(open(out / "weightwatcher.csv"))] == [0, 1]
    assert {r["tensor"] for r in csv.DictReader(open(out / "metrics.csv"))} == set(shapes)
