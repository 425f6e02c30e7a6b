"""Fit diagnostics (issue 18): the runner-up x_min against powerlaw 1.5's own KS landscape, and the
statuses end to end through analyze, metrics.csv and report.

The runner-up's reference: powerlaw.Fit keeps every candidate x_min with its KS distance (fit.xmins,
fit.Ds) and alpha (fit.alphas); among candidates whose tail holds >= 50 points and at most half or at
least twice the optimal tail, the first argmin of D is the runner-up.
"""
import contextlib
import csv
import io
import json
import math
import subprocess
import warnings

import numpy as np
import pytest

from conftest import run, tool

powerlaw = pytest.importorskip("powerlaw")
st = pytest.importorskip("safetensors.numpy")

TOOL = tool("spectral_fit_tool")


def fit_tool(esd, **extra):
    p = subprocess.run([TOOL], input=json.dumps({"esd": list(map(float, esd)), **extra}), capture_output=True,
                       text=True, check=True)
    return json.loads(p.stdout)


def pareto(rng, alpha, n, xmin):
    return xmin * (1.0 - rng.random(n)) ** (-1.0 / (alpha - 1.0))


def two_regime(seed):
    """A Marchenko-Pastur bulk, a Pareto(2) stretch up to 30 and a Pareto(6) tail above it."""
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(300, 600))
    bulk = np.linalg.eigvalsh(g @ g.T / 600)
    a = pareto(rng, 2.0, 400, 3.0)
    return np.sort(np.concatenate([bulk, a[a < 30], pareto(rng, 6.0, 80, 30.0)]))


def one_tail(seed):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(300, 600))
    bulk = np.linalg.eigvalsh(g @ g.T / 600)
    return np.sort(np.concatenate([bulk, pareto(rng, 3.0, 200, 1.05 * bulk.max())]))


def powerlaw_runner_up(esd, min_tail=50):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        fit = powerlaw.Fit(esd, xmin_distribution="power_law", discrete=False, verbose=False)
    x = np.sort(esd[esd > 0])
    n_tail = np.array([len(x) - np.searchsorted(x, xm, side="left") for xm in fit.xmins])
    best = int(np.argmin(fit.Ds))
    n1 = n_tail[best]
    ok = (n_tail >= min_tail) & ((2 * n_tail <= n1) | (n_tail >= 2 * n1))
    if not ok.any():
        return fit, None
    d = np.where(ok, fit.Ds, np.inf)
    j = int(np.argmin(d))
    return fit, {"alpha": fit.alphas[j], "xmin": fit.xmins[j], "gap": fit.Ds[j] - fit.Ds[best], "n": n_tail[j]}


@pytest.mark.parametrize("make,seed", [(two_regime, 1), (two_regime, 2), (one_tail, 3), (one_tail, 4)])
def test_runner_up_matches_powerlaw_landscape(make, seed):
    esd = make(seed)
    fit, ref = powerlaw_runner_up(esd)
    got = fit_tool(esd)
    assert ref is not None
    assert got["pl_esd_xmin2"] == ref["xmin"]
    assert got["pl_n_tail_xmin2"] == ref["n"]
    assert math.isclose(got["pl_alpha_xmin2"], ref["alpha"], rel_tol=1e-9)
    assert math.isclose(got["pl_ks_gap"], ref["gap"], rel_tol=1e-6, abs_tol=1e-12)
    # What the field is for: two regimes give two distant exponents, one tail gives one. Distance in units
    # of the runner-up's standard error (alpha - 1) / sqrt(n) (Clauset et al. 2009, eq. 3.2).
    se = (got["pl_alpha_xmin2"] - 1) / math.sqrt(got["pl_n_tail_xmin2"])
    z = abs(got["pl_alpha"] - got["pl_alpha_xmin2"]) / se
    if make is two_regime:
        assert z > 20, got
    else:
        assert z < 4, got


def matrix_with_esd(esd, rows, cols, seed):
    """A rows x cols matrix (rows <= cols) with ESD sigma^2 / cols equal to `esd`, random singular vectors."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.normal(size=(rows, rows)))[0]
    v = np.linalg.qr(rng.normal(size=(cols, rows)))[0]
    return ((u * np.sqrt(np.asarray(esd) * cols)) @ v.T).astype(np.float64)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("diag")
    rng = np.random.default_rng(7)
    tensors = {
        # 2 x 384 as BERT's token_type_embeddings: no fit has enough points.
        "bert.embeddings.token_type_embeddings.weight": rng.normal(0, 0.02, size=(2, 384)),
        # A Gaussian: a Marchenko-Pastur bulk, pure noise.
        "bert.encoder.layer.0.intermediate.dense.weight": rng.normal(0, 0.02, size=(400, 800)),
    }
    # A two-regime ESD (about 740 eigenvalues).
    esd = two_regime(1) * 1e-3
    tensors["bert.encoder.layer.0.output.dense.weight"] = matrix_with_esd(esd, len(esd), 1536, 1)
    st.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(d / "model.safetensors"))
    return d, tensors


def read_rows(path):
    return {r["tensor"]: r for r in csv.DictReader(open(path))}


def test_statuses_in_metrics_csv_and_report(model, tmp_path):
    d, tensors = model
    run(["analyze", d, "--out", tmp_path / "an", "--store", tmp_path / "s.sqlite", "--quiet", "--no-heads"])
    rows = read_rows(tmp_path / "an" / "metrics.csv")
    tiny = rows["bert.embeddings.token_type_embeddings.weight"]
    for fit in ("pl", "tpl", "expon", "mp"):
        assert tiny[f"{fit}_status"] == "too_few", fit
    assert float(tiny["mp_n_bulk"]) <= 2 and float(tiny["pl_n_tail"]) <= 2
    # A too_few tail fit keeps its values (shown flagged); its diagnostics and the MP fit do not.
    for f in ("mp_esd_max", "mp_ks", "pl_alpha_xmin2", "pl_n_tail_xmin2", "pl_ks_gap", "pl_concentration"):
        assert tiny[f] == "nan", f
    two = rows["bert.encoder.layer.0.output.dense.weight"]
    assert two["pl_status"] == "ok" and two["mp_status"] in ("ok", "too_few")
    assert int(float(two["pl_n_tail"])) >= 50
    # The runner-up x_min exposes the second regime, by many standard errors of the runner-up.
    n2 = float(two["pl_n_tail_xmin2"])
    assert n2 >= 50 and (2 * n2 <= float(two["pl_n_tail"]) or n2 >= 2 * float(two["pl_n_tail"]))
    se = (float(two["pl_alpha_xmin2"]) - 1) / math.sqrt(n2)
    assert abs(float(two["pl_alpha"]) - float(two["pl_alpha_xmin2"])) > 20 * se
    noise = rows["bert.encoder.layer.0.intermediate.dense.weight"]
    assert noise["mp_status"] == "ok" and int(float(noise["mp_n_bulk"])) >= 390
    # Every status is a name from the table; every n_tail an integer.
    names = {"ok", "too_few", "no_convergence", "at_bound:alpha", "at_bound:lambda"}
    for r in rows.values():
        for fit in ("pl", "tpl", "expon", "mp"):
            assert r[f"{fit}_status"] in names
        assert float(r["pl_n_tail"]).is_integer()
        # too_few exactly below the minimum: the fitted tail is reported either way.
        assert (r["pl_status"] == "too_few") == (float(r["pl_n_tail"]) < 50)
        tpl_alpha = float(r["tpl_alpha"])
        if r["tpl_status"] not in ("too_few", "no_convergence"):
            assert (r["tpl_status"] == "at_bound:alpha") == (tpl_alpha <= 1 + 1e-4)
    # The report reads the names back.
    run(["report", tmp_path / "an", "--out", tmp_path / "r.html"])
    assert (tmp_path / "r.html").stat().st_size > 0


def test_min_fit_size_zero_reports_every_fit_as_powerlaw(model, tmp_path):
    d, tensors = model
    run(["analyze", d, "--out", tmp_path / "an", "--store", tmp_path / "s.sqlite", "--quiet", "--no-heads",
         "--min-fit-size", "0", "--metrics", "pl_alpha,pl_status,pl_n_tail"])
    rows = read_rows(tmp_path / "an" / "metrics.csv")
    for name, w in tensors.items():
        r = rows[name]
        assert r["pl_status"] == "ok"
        m = max(w.shape)
        esd = np.sort(np.linalg.svd(w, compute_uv=False) ** 2 / m)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            fit = powerlaw.Fit(esd, xmin_distribution="power_law", discrete=False, verbose=False)
        assert math.isclose(float(r["pl_alpha"]), fit.power_law.alpha, rel_tol=1e-6), name
        assert int(float(r["pl_n_tail"])) == int((esd >= fit.xmin).sum())
    p = run(["analyze", d, "--out", tmp_path / "x", "--min-fit-size", "-1"], check=False)
    assert p.returncode == 2 and "--min-fit-size" in p.stderr


def test_too_few_fits_keep_their_values_flagged(model, tmp_path):
    """Issue 31: alpha for every matrix, a too_few fit flagged rather than dropped. Under the default minimum
    every tail fit's values equal those of --min-fit-size 0 (which trusts every fit); only the status
    differs, and it is too_few exactly where the tail is under 50 points."""
    d, _ = model
    fields = "pl_alpha,pl_ks,pl_status,pl_n_tail,tpl_alpha,tpl_status,expon_lambda,expon_status"
    args = ["analyze", d, "--store", tmp_path / "s.sqlite", "--quiet", "--metrics", fields]
    run([*args, "--out", tmp_path / "default"])
    run([*args, "--out", tmp_path / "all", "--min-fit-size", "0"])
    default = list(csv.DictReader(open(tmp_path / "default" / "metrics.csv")))
    every = list(csv.DictReader(open(tmp_path / "all" / "metrics.csv")))
    assert len(default) == len(every) == 3
    flagged = 0
    for r, a in zip(default, every):
        assert (r["tensor"], r["head"]) == (a["tensor"], a["head"])
        for f in ("pl_alpha", "pl_ks", "tpl_alpha", "expon_lambda"):
            assert r[f] == a[f], (r["tensor"], r["head"], f)
        too_few = r["pl_status"] == "too_few"
        flagged += too_few
        assert too_few == (int(float(r["pl_n_tail"])) < 50)
        if too_few and int(float(r["pl_n_tail"])) > 1:
            assert math.isfinite(float(r["pl_alpha"])), r["tensor"]
    assert flagged > 0


def test_alpha_interval_option(model, tmp_path):
    d, tensors = model
    fields = "pl_alpha,pl_status,pl_alpha_ci_low,pl_alpha_ci_high"
    args = ["analyze", d, "--store", tmp_path / "s.sqlite", "--quiet", "--no-heads", "--metrics", fields]
    run([*args, "--out", tmp_path / "off"])
    run([*args, "--out", tmp_path / "on", "--alpha-ci", "100", "--alpha-ci-seed", "3"])
    off, on = read_rows(tmp_path / "off" / "metrics.csv"), read_rows(tmp_path / "on" / "metrics.csv")
    for name, r in on.items():
        assert off[name]["pl_alpha_ci_low"] == "nan" and off[name]["pl_alpha_ci_high"] == "nan"
        if r["pl_status"] == "too_few":
            assert r["pl_alpha_ci_low"] == "nan"
        else:
            assert float(r["pl_alpha_ci_low"]) <= float(r["pl_alpha"]) <= float(r["pl_alpha_ci_high"]), name
    assert any(r["pl_status"] == "ok" for r in on.values())
    p = run([*args, "--out", tmp_path / "x", "--alpha-ci", "-1"], check=False)
    assert p.returncode == 2 and "--alpha-ci" in p.stderr


def test_report_refuses_an_unknown_status_name(model, tmp_path):
    d, _ = model
    run(["analyze", d, "--out", tmp_path / "an", "--store", tmp_path / "s.sqlite", "--quiet", "--no-heads",
         "--metrics", "pl_alpha,pl_status"])
    path = tmp_path / "an" / "metrics.csv"
    text = path.read_text()
    assert ",ok" in text or ",too_few" in text
    path.write_text(text.replace(",too_few", ",bogus").replace(",ok", ",bogus"))
    p = run(["report", tmp_path / "an", "--out", tmp_path / "r.html"], check=False)
    assert p.returncode == 2 and "expected a fit status, found 'bogus'" in p.stderr and "pl_status" in p.stderr


def test_python_options_equal_the_cli(model, tmp_path):
    diffract = pytest.importorskip("diffract_spectral")
    d, _ = model
    fields = "pl_alpha,pl_status,pl_n_tail,pl_alpha_ci_low,pl_alpha_ci_high"
    cli = tmp_path / "cli"
    run(["analyze", d, "--out", cli, "--store", tmp_path / "a.sqlite", "--quiet", "--no-heads", "--metrics", fields,
         "--min-fit-size", "10", "--alpha-ci", "40", "--alpha-ci-seed", "9", "--convention", "weightwatcher"])
    res = diffract.analyze(str(d), metrics=fields, heads=False, store=str(tmp_path / "b.sqlite"), min_fit_size=10,
                           alpha_ci=40, alpha_ci_seed=9, convention="weightwatcher", out=str(tmp_path / "py"))
    rows = read_rows(cli / "metrics.csv")
    table = res.metrics.to_dict("records") if hasattr(res.metrics, "to_dict") else None
    assert table is not None
    for r in table:
        c = rows[r["tensor"]]
        assert r["pl_status"] == c["pl_status"]  # names, as metrics.csv
        for f in ("pl_alpha", "pl_n_tail", "pl_alpha_ci_low", "pl_alpha_ci_high"):
            assert (math.isnan(r[f]) and c[f] == "nan") or r[f] == float(c[f]), f
    assert (tmp_path / "py" / "weightwatcher.csv").read_bytes() == (cli / "weightwatcher.csv").read_bytes()
    with pytest.raises(Exception, match="min_fit_size="):
        diffract.analyze(str(d), metrics="pl_alpha", store=str(tmp_path / "b.sqlite"), min_fit_size=-1)
