"""Model-level (IN_MODEL) fields accepted by --metrics (issue 18 item 6): selecting an aggregate computes
the per-matrix field it needs and aggregates.csv carries its value, checked against numpy over metrics.csv."""
import csv

import numpy as np

from conftest import run


def read(path):
    return list(csv.DictReader(open(path)))


def test_selected_aggregates_are_computed(family_f32, tmp_path):
    model = family_f32 / "math"
    store = tmp_path / "s.sqlite"
    run(["analyze", model, "--out", tmp_path / "agg", "--store", store, "--quiet", "--min-fit-size", "0",
         "--metrics", "model_pl_alpha_norm,log_norm"])
    metrics = read(tmp_path / "agg" / "metrics.csv")
    assert "pl_alpha_norm" not in metrics[0] and "log_norm" not in metrics[0]  # metrics.csv: selected fields
    agg = read(tmp_path / "agg" / "aggregates.csv")[0]
    # The reference: the per-matrix field computed on its own, aggregated by numpy over whole matrices.
    run(["analyze", model, "--out", tmp_path / "per", "--store", tmp_path / "t.sqlite", "--quiet",
         "--min-fit-size", "0", "--metrics", "pl_alpha_norm,frob_norm"])
    whole = [r for r in read(tmp_path / "per" / "metrics.csv") if r["head"] == ""]
    norms = np.array([float(r["pl_alpha_norm"]) for r in whole])
    norms = norms[np.isfinite(norms) & (norms > 0)]
    assert len(norms) > 3
    np.testing.assert_allclose(float(agg["model_pl_alpha_norm"]), np.mean(np.log10(norms)), rtol=1e-12)
    frob = np.array([float(r["frob_norm"]) for r in whole])
    np.testing.assert_allclose(float(agg["log_norm"]), np.mean(np.log10(frob ** 2)), rtol=1e-12)
    # Not selected and its input not computed: NaN, as before.
    run(["analyze", model, "--out", tmp_path / "plain", "--store", store, "--quiet", "--metrics", "frob_norm"])
    plain = read(tmp_path / "plain" / "aggregates.csv")[0]
    assert plain["model_pl_alpha_norm"] == "nan" and plain["log_norm"] == agg["log_norm"]


def test_cross_model_and_vector_fields_still_refused(family_f32, tmp_path):
    for field in ("l_overlap", "avg_l_agreement", "weights_svals"):
        p = run(["analyze", family_f32 / "math", "--out", tmp_path / "x", "--metrics", field], check=False)
        assert p.returncode == 2 and field in p.stderr and "not a per-matrix or per-model scalar" in p.stderr
