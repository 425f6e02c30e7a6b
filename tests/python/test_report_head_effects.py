"""Issue 34, the report of a ranking's checks: rewind-each and sweep-validate directories are drawn (a
point per head with its change, the validation's importance-vs-change scatter with Spearman in the
title, its sets beside their matched random sets, the verdict in the caption); a rewind figure keeps
its axis for the curves when a reference lies far outside them (named at the edge, off scale); the y
axis names the score key and its direction."""
import json
import re

import pytest

from conftest import run
from report_inputs import figures_of


def write_dir(root, name, files):
    d = root / name
    d.mkdir()
    for file, text in files.items():
        (d / file).write_text(text)
    return d


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    root = tmp_path_factory.mktemp("effects")
    each = write_dir(root, "each", {
        "heads_effect.csv": "layer,head,score,delta,greedy_rank,eval_seconds\n"
                            "0,0,9.5,-0.5,3,1\n0,1,10.25,0.25,0,1\n1,0,10.0,0,1,1\n1,1,9.0,-1,2,1\n",
        "summary.json": json.dumps({"sweep": "rewind-each", "unedited_score": 10.0, "score_key": "neg_loss"})})
    validate = write_dir(root, "val", {
        "heads_validation.csv": "layer,head,importance,rank,score,harm\n"
                                "0,0,0.9,3,13.0,3.0\n0,1,0.1,0,9.5,-0.5\n1,0,0.5,2,11.0,1.0\n1,1,0.2,1,10.0,0\n",
        "summary.json": json.dumps({
            "sweep": "validate", "direction": "lower", "score_key": "perplexity",
            "predictive": {"spearman": 0.8, "ci95": [0.2, 1.0], "p_value": 0.04},
            "sets": [{"set": "bottom", "harm": -0.5}, {"set": "top", "harm": 4.0},
                     {"set": "random_bottom", "harm": 1.0}, {"set": "random_top", "harm": 0.5}],
            "verdict": ["the ranking predicts what rewinding one head does: Spearman 0.80"]})})
    rewind = write_dir(root, "rw", {
        "curve.csv": "order,seed,x,score\nimportance,0,0,130\nimportance,0,0.5,125\nimportance,0,1,148\n"
                     "random,0,0,130\nrandom,0,0.5,140\nrandom,0,1,148\n",
        "summary.json": json.dumps({"sweep": "rewind", "score_key": "perplexity",
                                    "references": {"base": {"score": 498.0}, "model": {"score": 130.0}}})})
    out = root / "r.html"
    run(["report", each, validate, rewind, "--out", out, "--quiet"])
    return figures_of(out.read_text()), out.read_text()


def test_rewind_each_draws_a_point_per_head(figures):
    svg = figures[0]["head-effects-rewind-each"]
    for layer, head, delta in ((0, 0, -0.5), (0, 1, 0.25), (1, 0, 0), (1, 1, -1)):
        assert f"layer {layer} head {head}: {delta:+.4g}" in svg
    assert "Δ neg_loss (higher is better)" in svg


def test_validation_scatter_sets_and_verdict(figures):
    svg = figures[0]["head-effects-validate"]
    assert "Spearman 0.80 [0.20, 1.00]" in svg
    # Lower is better: a head's change is its harm (perplexity rises when it is lost).
    assert "layer 0 head 0: importance 0.9, change +3" in svg and "Δ perplexity (lower is better)" in svg
    assert len(re.findall(r"<polygon ", svg)) == 2  # the two sets
    assert svg.count("random set matched to the") == 2
    assert "the ranking predicts what rewinding one head does" in figures[1]


def test_rewind_axis_keeps_the_curves_and_names_far_references_at_the_edge(figures):
    svg = figures[0]["sweep-rewind"]
    assert "base 498 ↓ (off scale)" in svg or "base 498 ↑ (off scale)" in svg
    assert ">model 130<" in svg  # near the curves: a line
    ticks = [float(t) for t in re.findall(r'text-anchor="end"[^>]*>(-?[\d.]+)</text>', svg)]
    assert ticks and max(ticks) < 200  # the axis spans the curves (125..148), not the base
    assert "perplexity (lower is better)" in svg
