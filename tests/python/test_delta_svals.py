"""compare stores each update's singular values (delta_svals, ascending) and the report draws them:
checked against numpy's SVD of W_model − W_base, on both compare routes, for whole matrices and head
blocks, and against the fractions of energy the delta-spectrum figure's hover text states.

Tolerances: both sides factorise the same F32 differences in f64. The whole-matrix route (gesdd) and
numpy agree to 1e-9 of σ_max; the Gram route takes square roots of the eigenvalues of ΔᵀΔ, whose
absolute error is ~ε64·σ_max², so its small σ carry an absolute error up to ~1e-7·σ_max (checked
at 1e-6·σ_max)."""
import json
import re

import numpy as np
import pytest

from conftest import run
from report_inputs import figures_of

st = pytest.importorskip("safetensors.numpy")


def weights(model_dir):
    return st.load_file(str(model_dir / "model.safetensors"))


def exported_deltas(store):
    out = {}
    for line in run(["export", "--store", store, "--format", "jsonl"]).stdout.splitlines():
        j = json.loads(line)
        if j["field"] == "delta_svals":
            out[(j["model"], j["tensor"], j["block"])] = np.array(j["vector"])
    return out


@pytest.fixture(scope="module")
def compared(family_f32, tmp_path_factory):
    out = tmp_path_factory.mktemp("delta")
    stores = {}
    for route in ("gesdd", "gram"):
        stores[route] = out / f"{route}.sqlite"
        run(["compare", "--base", family_f32 / "pretrained", family_f32 / "math", "--out", out / route,
             "--store", stores[route], "--svd-route", route, "--quiet"])
    return out, stores


@pytest.mark.parametrize("route,tol", [("gesdd", 1e-9), ("gram", 1e-6)])
def test_delta_svals_match_numpy(family_f32, compared, route, tol):
    base, math = weights(family_f32 / "pretrained"), weights(family_f32 / "math")
    deltas = exported_deltas(compared[1][route])
    config = json.loads((family_f32 / "pretrained" / "config.json").read_text())
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    checked = 0
    for name, w in base.items():
        if w.ndim != 2:
            continue
        d = math[name].astype(np.float64) - w.astype(np.float64)
        want = np.linalg.svd(d, compute_uv=False)[::-1]  # ascending, as stored
        got = deltas[("math", name, "")]
        assert got.shape == want.shape, name
        assert np.max(np.abs(got - want)) <= tol * max(want[-1], 1e-30), (route, name)
        checked += 1
        if name.endswith("q_proj.weight"):  # head 1 of W_Q: its rows
            block = d[head_dim:2 * head_dim]
            want = np.linalg.svd(block, compute_uv=False)[::-1]
            got = deltas[("math", name, "attn_q:1")]
            assert np.max(np.abs(got - want)) <= tol * want[-1], (route, name, "head 1")
    assert checked >= 8


def test_delta_spectrum_figure_states_numpy_energy_fractions(family_f32, compared, tmp_path):
    """The figure's hover text (the fractions of components holding 50 % and 90 % of ‖ΔW‖²_F) for every
    drawn layer matrix equals numpy's."""
    out, stores = compared
    report = tmp_path / "r.html"
    run(["report", out / "gesdd", "--store", stores["gesdd"], "--out", report, "--quiet"])
    figs = figures_of(report.read_text())
    assert "delta-spectrum-math" in figs
    fig = figs["delta-spectrum-math"]
    base, math = weights(family_f32 / "pretrained"), weights(family_f32 / "math")
    tips = re.findall(r"<title>layer (\d+) · ([^:]+): k = (\d+), 50 % of ‖ΔW‖²_F in the top ([\d.e+-]+), "
                      r"90 % in the top ([\d.e+-]+)</title>", fig)
    assert len(tips) >= 2 * 3 * 2  # two rows of panels × three roles × two layers
    for layer, tensor, k, half, ninety in tips:
        s = np.linalg.svd(math[tensor].astype(np.float64) - base[tensor].astype(np.float64), compute_uv=False)
        cum = np.cumsum(s ** 2) / np.sum(s ** 2)
        frac = lambda q: (np.argmax(cum >= q) + 1) / len(s)
        assert int(k) == len(s)
        assert float(half) == pytest.approx(frac(0.5), rel=2e-3), tensor
        assert float(ninety) == pytest.approx(frac(0.9), rel=2e-3), tensor
