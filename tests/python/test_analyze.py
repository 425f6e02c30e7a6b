"""`diffract analyze` against independent computations: numpy's SVD (LAPACK gesdd in f64) for the
spectrum-derived fields, the formulas of reference/metrics.md re-implemented here in numpy for the
Marchenko-Pastur fit, `powerlaw` for the power-law fit; planted structure of the synthetic family;
the store's reuse, resume after kill -9, erase, merge and export."""
import csv
import json
import os
import signal
import sqlite3
import subprocess
import time

import numpy as np
import powerlaw
import pytest
from safetensors.numpy import load_file

from conftest import binary, run

EPS = 1e-16


def rows_of(out):
    return list(csv.DictReader(open(out / "metrics.csv")))


@pytest.fixture(scope="module")
def analyzed(family_f32, tmp_path_factory):
    out = tmp_path_factory.mktemp("an")
    run(["analyze", family_f32 / "pretrained", family_f32 / "math", "--out", out / "csv", "--store", out / "s.sqlite", "--quiet"])
    weights = load_file(str(family_f32 / "pretrained" / "model.safetensors"))
    return out, rows_of(out / "csv"), weights


def numpy_fields(w):
    """The spectrum-derived fields, straight from reference/metrics.md, in float64."""
    w = w.astype(np.float64)
    s = np.sort(np.linalg.svd(w, compute_uv=False))
    N, M = max(w.shape), min(w.shape)
    esd = s**2 / N
    p = s / (s.sum() + EPS)
    return {
        "greater_dim": N, "lower_dim": M, "aspect_ratio": N / M, "weights_std": w.std(),
        "max_weights_sval": s[-1], "min_weights_sval": s[0], "esd_max": esd[-1], "esd_min": esd[0],
        "frob_norm": np.sqrt((s**2).sum()), "nuclear_norm": s.sum(), "l2_norm": s[-1],
        "stable_rank": (np.sqrt((s**2).sum()) / (s[-1] + EPS)) ** 2,
        "effective_rank": np.exp(-(p * np.log(p + EPS)).sum()),
        "hard_rank": int((esd > 1e-5 * esd[-1]).sum()),
    }, esd


def test_metrics_csv_layout(analyzed):
    _, rows, _ = analyzed
    assert list(rows[0])[:10] == ["model", "tensor", "component", "layer", "role", "expert", "expert_kind", "head",
                                  "rows", "cols"]
    assert {r["component"] for r in rows} == {"language"} and not any(r["expert"] or r["expert_kind"] for r in rows)
    models = {r["model"] for r in rows}
    assert models == {"pretrained", "math"}
    q_heads = [r for r in rows if r["model"] == "math" and r["tensor"].endswith("layers.0.self_attn.q_proj.weight") and r["head"]]
    assert sorted(int(r["head"]) for r in q_heads) == [0, 1, 2, 3]
    assert all(r["role"] == "attn_q" and r["rows"] == "32" and r["cols"] == "128" for r in q_heads)


def test_spectral_fields_match_numpy(analyzed):
    # Tolerance: f64 SVD through the Gram route (default) vs numpy's gesdd: relative 1e-9 on values of
    # a well-conditioned spectrum; effective/stable rank inherit it.
    _, rows, weights = analyzed
    checked = 0
    for r in rows:
        if r["model"] != "pretrained":
            continue
        w = weights[r["tensor"]]
        if r["head"]:
            h, d = int(r["head"]), int(r["rows"]) if r["role"] != "attn_o" else int(r["cols"])
            w = w[h * d:(h + 1) * d, :] if r["role"] != "attn_o" else w[:, h * d:(h + 1) * d]
        expected, _ = numpy_fields(w)
        for field, value in expected.items():
            np.testing.assert_allclose(float(r[field]), value, rtol=1e-9, atol=1e-12, err_msg=f"{r['tensor']} {r['head']} {field}")
        checked += 1
    assert checked > 20


def test_marchenko_pastur_and_power_law_match_reference_formulas(analyzed):
    _, rows, weights = analyzed
    r = next(r for r in rows if r["model"] == "pretrained" and r["tensor"] == "model.layers.1.mlp.up_proj.weight")
    w = weights[r["tensor"]].astype(np.float64)
    expected, esd = numpy_fields(w)
    Q, M = expected["aspect_ratio"], expected["lower_dim"]
    # The MP edge from weights_std when the permutation null does not exceed it (the usual case for
    # a Gaussian bulk): lambda_+ = s^2 (1 + 1/sqrt(Q))^2.
    s2 = w.std() ** 2
    lam_plus = s2 * (1 + 1 / np.sqrt(Q)) ** 2
    if float(r["esd_rand_max"]) <= lam_plus:
        np.testing.assert_allclose(float(r["mp_esd_max"]), min(lam_plus, esd[-1]), rtol=1e-9)
        np.testing.assert_allclose(float(r["mp_esd_min"]), s2 * (1 - 1 / np.sqrt(Q)) ** 2, rtol=1e-9)
    mp_max = float(r["mp_esd_max"])
    assert int(float(r["mp_num_spikes"])) == int((esd > mp_max).sum())
    np.testing.assert_allclose(float(r["mp_soft_rank"]), mp_max / (esd[-1] + EPS), rtol=1e-9)
    # Power law: same x_min and alpha as the powerlaw package (1.5) on the same ESD.
    fit = powerlaw.Fit(esd, distribution="power_law", xmin_distribution="power_law", discrete=False, verbose=False)
    np.testing.assert_allclose(float(r["pl_esd_xmin"]), fit.power_law.xmin, rtol=1e-9)
    np.testing.assert_allclose(float(r["pl_alpha"]), fit.power_law.alpha, rtol=1e-6)
    np.testing.assert_allclose(float(r["pl_ks"]), fit.power_law.D, rtol=1e-6)
    np.testing.assert_allclose(float(r["pl_alpha_weighted"]), fit.power_law.alpha * np.log10(esd[-1]), rtol=1e-6)


def test_planted_spikes_are_counted(analyzed, family_f32):
    _, rows, _ = analyzed
    planted = json.loads((family_f32 / "planted.json").read_text())["mlp_spikes"]
    mlp = [r for r in rows if r["model"] == "pretrained" and r["role"] in ("mlp_up", "mlp_gate", "mlp_down")]
    assert mlp
    for r in mlp:
        assert int(float(r["mp_num_spikes"])) >= planted, r["tensor"]
        assert int(float(r["tw_num_spikes"])) >= planted, r["tensor"]
        assert int(float(r["tw_num_spikes"])) <= planted + 2, r["tensor"]  # the Gaussian bulk stays inside


def test_aggregates_follow_their_formulas(analyzed):
    out, rows, _ = analyzed
    agg = {r["model"]: r for r in csv.DictReader(open(out / "csv" / "aggregates.csv"))}
    whole = [r for r in rows if r["model"] == "math" and not r["head"]]
    frob = np.array([float(r["frob_norm"]) for r in whole])
    l2 = np.array([float(r["l2_norm"]) for r in whole])
    np.testing.assert_allclose(float(agg["math"]["log_norm"]), np.mean(np.log10(frob**2)), rtol=1e-12)
    np.testing.assert_allclose(float(agg["math"]["log_spectral_norm"]), np.mean(np.log10(l2**2)), rtol=1e-12)
    np.testing.assert_allclose(float(agg["math"]["param_norm"]), np.sum(frob**2), rtol=1e-12)
    np.testing.assert_allclose(float(agg["math"]["log_prod_spectral_norm"]), np.sum(np.log10(l2)), rtol=1e-12)


def test_precisions_and_routes_agree(family_f32, tmp_path):
    # f32 LAPACK vs f64: relative 1e-4 on singular-value fields (f32 epsilon times condition).
    results = {}
    for label, flags in {"f64": [], "f32": ["--precision", "f32"], "gesdd": ["--svd-route", "gesdd"]}.items():
        run(["analyze", family_f32 / "math", "--out", tmp_path / label, "--store", tmp_path / "s.sqlite", "--quiet",
             "--metrics", "frob_norm,l2_norm,nuclear_norm,min_weights_sval", "--no-heads", *flags])
        results[label] = rows_of(tmp_path / label)
    for a, b, b_other in zip(results["f64"], results["f32"], results["gesdd"]):
        for f in ("frob_norm", "l2_norm", "nuclear_norm"):
            np.testing.assert_allclose(float(b[f]), float(a[f]), rtol=1e-4)
            np.testing.assert_allclose(float(b_other[f]), float(a[f]), rtol=1e-10)


def test_selection_flags(family_f32, tmp_path):
    run(["analyze", f"cpt={family_f32 / 'math'}", "--out", tmp_path / "an", "--store", tmp_path / "s.sqlite", "--quiet",
         "--metrics", "frob_norm", "--roles", "attn_q,mlp_down", "--layers", "1", "--exclude", "mlp"])
    rows = rows_of(tmp_path / "an")
    assert rows and {r["model"] for r in rows} == {"cpt"}
    assert {r["tensor"] for r in rows} == {"model.layers.1.self_attn.q_proj.weight"}
    p = run(["analyze", family_f32 / "math", "--out", tmp_path / "x", "--roles", "attention"], check=False)
    assert p.returncode == 2 and "unknown role 'attention'" in p.stderr
    p = run(["analyze", family_f32 / "math", "--out", tmp_path / "x", "--metrics", "frob_normz"], check=False)
    assert p.returncode == 2 and "unknown field 'frob_normz'" in p.stderr


def computed_count(stderr):
    # "analyze: N matrices (C computed, R reused from ...)"
    return int(stderr.split("(")[1].split(" computed")[0])


def test_store_reuse_config_change_erase_merge_export(family_f32, tmp_path):
    store = tmp_path / "s.sqlite"
    args = ["analyze", family_f32 / "code", "--out", tmp_path / "a", "--store", store, "--metrics", "frob_norm,pl_alpha"]
    first = run(args)
    assert computed_count(first.stderr) > 0
    assert computed_count(run(args).stderr) == 0
    # A different kernel configuration is a new result, never a silent reuse.
    assert computed_count(run([*args, "--seed", "7"]).stderr) > 0
    # Erasing the ESD erases what was computed from it (pl_alpha), not the norms.
    run(["store", "--store", store, "erase", "--fields", "esd"])
    fields = sqlite3.connect(store).execute("SELECT DISTINCT field FROM results").fetchall()
    names = {f[0] for f in fields}
    assert "pl_alpha" not in names and "frob_norm" in names
    assert computed_count(run(args).stderr) > 0
    # Export and merge.
    run(["export", "--store", store, "--format", "jsonl", "--out", tmp_path / "all.jsonl"])
    lines = [json.loads(l) for l in open(tmp_path / "all.jsonl")]
    assert any(l["field"] == "weights_svals" and len(l["vector"]) > 0 for l in lines)
    other = tmp_path / "other.sqlite"
    run(["analyze", family_f32 / "text", "--out", tmp_path / "b", "--store", other, "--metrics", "frob_norm", "--quiet"])
    run(["store", "--store", store, "merge", other])
    listing = run(["store", "--store", store, "list"]).stdout
    assert "text" in listing and "code" in listing
    run(["store", "--store", store, "erase", "--model", "text"])
    assert "text " not in run(["store", "--store", store, "list"]).stdout


def test_kill_9_then_resume_gives_identical_csvs(tmp_path):
    fam = tmp_path / "fam"
    run(["generate", "--out", fam, "--layers", "6", "--hidden", "384", "--heads", "6", "--intermediate", "1024",
         "--domain-heads", "1", "--generic-heads", "1"])
    clean = tmp_path / "clean"
    run(["analyze", fam / "math", fam / "code", "--out", clean, "--store", tmp_path / "clean.sqlite", "--quiet"])
    store = tmp_path / "killed.sqlite"
    cmd = [binary(), "analyze", str(fam / "math"), str(fam / "code"), "--out", str(tmp_path / "resumed"), "--store", str(store), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    killed_midway = False
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
        try:
            n = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1).execute("SELECT COUNT(DISTINCT content || block) FROM results").fetchone()[0]
        except sqlite3.Error:
            continue
        if n >= 20:
            proc.send_signal(signal.SIGKILL)
            killed_midway = True
            break
    proc.wait()
    assert killed_midway, "the run finished before it could be killed; make the family larger"
    assert not (tmp_path / "resumed" / "metrics.csv").exists()
    resumed = run([a for a in cmd[1:] if a != "--quiet"])
    reused = int(resumed.stderr.split(" computed, ")[1].split(" reused")[0])
    assert computed_count(resumed.stderr) > 0 and reused >= 20  # resumed, not restarted
    for f in ("metrics.csv", "aggregates.csv"):
        assert (clean / f).read_bytes() == (tmp_path / "resumed" / f).read_bytes(), f


def test_concurrent_runs_share_one_store(family_f32, tmp_path):
    store = tmp_path / "shared.sqlite"
    procs = [subprocess.Popen([binary(), "analyze", str(family_f32 / "code"), str(family_f32 / "math"), "--out", str(tmp_path / f"o{i}"),
                               "--store", str(store), "--quiet", "--threads", "1"], stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert (tmp_path / "o0" / "metrics.csv").read_bytes() == (tmp_path / "o1" / "metrics.csv").read_bytes()
