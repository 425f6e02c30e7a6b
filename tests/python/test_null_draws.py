"""Several permutation-null draws (issue 18, item 2): with --null-draws K the null fields
(esd_rand_max/min, max/min_weights_rand_sval, w1_rand_distance) are means over K seeded permutations
and their *_null_std fields the standard deviation (ddof 1). Checked against numpy's own permutation
null of the same matrix (200 draws; scipy's Wasserstein distance); K = 1 is today's single draw.
"""
import csv
import json

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from conftest import assert_input_error, run

st = pytest.importorskip("safetensors.numpy")

FIELDS = ["esd_rand_max", "esd_rand_min", "max_weights_rand_sval", "min_weights_rand_sval", "w1_rand_distance"]
METRICS = ",".join(FIELDS + [f + "_null_std" for f in FIELDS])


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    rng = np.random.default_rng(18)
    # Heavy-tailed entries with a planted low-rank part: the null is far from the matrix's own ESD.
    w = (rng.standard_t(3, size=(120, 200)) + 3 * rng.normal(size=(120, 2)) @ rng.normal(size=(2, 200)))
    d = tmp_path_factory.mktemp("null")
    st.save_file({"layer.weight": w.astype(np.float32)}, str(d / "m.safetensors"))
    return d / "m.safetensors", w.astype(np.float32).astype(np.float64)


def analyze(path, out, *extra):
    run(["analyze", path, "--out", out, "--store", out.parent / "s.sqlite", "--quiet", "--metrics", METRICS,
         *extra])
    return next(csv.DictReader(open(out / "metrics.csv")))


def numpy_null(w, draws=200):
    rng = np.random.default_rng(0)
    n = max(w.shape)
    esd = np.sort(np.linalg.svd(w, compute_uv=False) ** 2 / n)
    out = {f: [] for f in FIELDS}
    for _ in range(draws):
        s = np.linalg.svd(rng.permutation(w.ravel()).reshape(w.shape), compute_uv=False)
        e = s ** 2 / n
        out["esd_rand_max"].append(e.max())
        out["esd_rand_min"].append(e.min())
        out["max_weights_rand_sval"].append(s.max())
        out["min_weights_rand_sval"].append(s.min())
        out["w1_rand_distance"].append(wasserstein_distance(esd, e) / esd.mean())
    return {f: np.array(v) for f, v in out.items()}


def test_one_draw_is_the_single_draw(matrix, tmp_path):
    path, _ = matrix
    one = analyze(path, tmp_path / "one", "--null-draws", "1")
    default = analyze(path, tmp_path / "default")
    for f in FIELDS:
        assert one[f] == default[f]
        assert one[f + "_null_std"] == "nan"


def test_many_draws_match_numpys_null(matrix, tmp_path):
    path, w = matrix
    k = 40
    ours = analyze(path, tmp_path / "many", "--null-draws", str(k))
    ref = numpy_null(w)
    for f in FIELDS:
        mu, sd = ref[f].mean(), ref[f].std(ddof=1)
        mean, std = float(ours[f]), float(ours[f + "_null_std"])
        # The mean of 40 draws lies within 4 standard errors of numpy's; the spread agrees within the
        # sampling error of a standard deviation from 40 draws (a factor 0.6 .. 1.5 at this size).
        assert abs(mean - mu) < 4 * sd / np.sqrt(k), (f, mean, mu, sd)
        assert 0.6 * sd < std < 1.5 * sd, (f, std, sd)
    # A draw count is part of the configuration: the single-draw results are not served for it.
    one = analyze(path, tmp_path / "one", "--null-draws", "1")
    assert one["w1_rand_distance"] != ours["w1_rand_distance"]


def test_python_null_draws_equal_the_cli(matrix, tmp_path):
    diffract = pytest.importorskip("diffract_spectral")
    path, _ = matrix
    cli = analyze(path, tmp_path / "cli", "--null-draws", "3")
    res = diffract.analyze(str(path), metrics=METRICS, null_draws=3, store=str(tmp_path / "p.sqlite"))
    row = res.metrics.iloc[0] if hasattr(res.metrics, "iloc") else {k: v[0] for k, v in res.metrics.items()}
    for f in FIELDS:
        assert float(row[f]) == pytest.approx(float(cli[f]), rel=1e-12)
        assert float(row[f + "_null_std"]) == pytest.approx(float(cli[f + "_null_std"]), rel=1e-12)


@pytest.mark.parametrize("k", ["0", "-2", "10001"])
def test_bad_draw_counts_are_refused(matrix, tmp_path, k):
    path, _ = matrix
    p = run(["analyze", path, "--out", tmp_path / "o", "--store", tmp_path / "s.sqlite", "--null-draws", k],
            check=False)
    assert_input_error(p, "--null-draws", k)
    assert not (tmp_path / "o").exists()
