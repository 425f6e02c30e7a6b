"""The bootstrap draws behind pl_p_value, tpl_p_value and expon_p_value are an option (issue 16:
resampling fields say how many draws they use and take it as an option): --p-value-draws N (Python
p_value_draws=N). A p-value is the share of N refits whose KS distance exceeds the data's, so with N
draws every finite p-value is a multiple of 1/N: a run that ignored N (or reused another N's stored
result) would show multiples of 1/100 instead.
"""
import csv

import numpy as np
import pytest

from conftest import assert_input_error, run

st = pytest.importorskip("safetensors.numpy")

FIELDS = ["pl_p_value", "tpl_p_value", "expon_p_value"]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    rng = np.random.default_rng(16)
    # Student-t entries: a heavy-tailed ESD whose tails hold well over the 50 points a p-value needs.
    w = rng.standard_t(2.5, size=(400, 800)).astype(np.float32)
    d = tmp_path_factory.mktemp("pvalue")
    st.save_file({"layer.weight": w}, str(d / "m.safetensors"))
    return d / "m.safetensors"


def p_values(path, out, store, *extra):
    run(["analyze", path, "--out", out, "--store", store, "--quiet", "--no-heads", "--metrics",
         ",".join(FIELDS), *extra])
    row = next(csv.DictReader(open(out / "metrics.csv")))
    return {f: float(row[f]) for f in FIELDS}


@pytest.mark.parametrize("draws", [7, 13])
def test_p_values_are_multiples_of_one_over_the_draws(matrix, tmp_path, draws):
    store = tmp_path / "s.sqlite"  # one store for both runs: the second must not reuse the first
    default = p_values(matrix, tmp_path / "default", store)
    values = p_values(matrix, tmp_path / "n", store, "--p-value-draws", str(draws))
    finite = [v for v in values.values() if np.isfinite(v)]
    assert finite, values
    for v in finite:
        assert 0.0 <= v <= 1.0
        assert abs(v * draws - round(v * draws)) < 1e-9, (draws, values)
    for v in default.values():
        if np.isfinite(v):
            assert abs(v * 100 - round(v * 100)) < 1e-9, default


@pytest.mark.parametrize("bad", ["0", "-3", "100001"])
def test_out_of_range_draws_are_refused(matrix, tmp_path, bad):
    p = run(["analyze", matrix, "--out", tmp_path / "o", "--store", tmp_path / "s.sqlite", "--quiet",
             "--p-value-draws", bad], check=False)
    assert_input_error(p, "--p-value-draws", bad)
    assert not (tmp_path / "o").exists()


def test_python_takes_the_same_option(matrix, tmp_path):
    diffract = pytest.importorskip("diffract_spectral")
    a = diffract.analyze(str(matrix), metrics=FIELDS, heads=False, p_value_draws=9, store=tmp_path / "s.sqlite")
    rows = a.metrics if isinstance(a.metrics, dict) else a.metrics.to_dict("list")
    finite = [v for f in FIELDS for v in rows[f] if np.isfinite(v)]
    assert finite
    for v in finite:
        assert abs(v * 9 - round(v * 9)) < 1e-9
    with pytest.raises(diffract.InputError, match="p_value_draws="):
        diffract.analyze(str(matrix), metrics=FIELDS, p_value_draws=0, store=tmp_path / "s.sqlite")
