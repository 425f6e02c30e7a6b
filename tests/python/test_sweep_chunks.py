"""Issue 34: the uncertainty of a rewind comparison over the evaluation's own data. An evaluator that
prints per-chunk scores ("chunks", docs/evaluators.md) gets, in summary.json, the AUC difference's 95 %
interval over chunks: the chunks resampled with replacement (the same indices for every point), each
point scored as the mean of its resampled chunks. Checked against the same computation here, from the
documented seeded stream; chunk lists are parsed from a list or per score field, kept in the journal
and refused when not finite."""
import json
import sys
import textwrap

import numpy as np
import pytest

from conftest import run
from test_sweep_validate import splitmix64, stream_seed

pytest.importorskip("safetensors.numpy")

EVAL = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    from safetensors.numpy import load_file

    cand, fam, form = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    planted = json.loads((fam / "planted.json").read_text())
    d = planted["hidden"] // planted["heads"]
    w, m = (load_file(str(x / "model.safetensors")) for x in (cand, fam / "math"))
    chunks = []
    for layer in range(planted["layers"]):
        for h in range(planted["heads"]):
            q = f"model.layers.{layer}.self_attn.q_proj.weight"
            chunks.append(-float(np.linalg.norm(w[q][h * d:(h + 1) * d].astype(np.float64) - m[q][h * d:(h + 1) * d])))
    score = float(np.mean(chunks))
    if form == "list":
        print(json.dumps({"chunks": chunks, "score": score}))
    elif form == "fields":
        print(json.dumps({"chunks": {"neg_dist": chunks, "dist": [-c for c in chunks]}, "dist": -score, "neg_dist": score}))
    else:
        print(json.dumps({"chunks": chunks[:-1] + ["x"], "score": score}))
    """
)


def trapezoid(points):
    points = sorted(points)
    return sum(0.5 * (y0 + y1) * (x1 - x0) for (x0, y0), (x1, y1) in zip(points, points[1:]))


def chunk_interval(journal_points, draws=20000):
    """The documented bootstrap: shared chunk indices per draw, AUC of the mean resampled chunks."""
    m = len(next(iter(journal_points.values()))[0][1])
    state, diffs = stream_seed(0, "chunk-bootstrap"), []
    for _ in range(draws):
        idx = []
        for _ in range(m):
            v, state = splitmix64(state)
            idx.append(v % m)
        aucs = {}
        for (order, seed), pts in journal_points.items():
            aucs.setdefault(order, []).append(trapezoid([(x, float(np.mean([c[i] for i in idx]))) for x, c in pts]))
        diffs.append(np.mean(aucs["importance"]) - np.mean(aucs["random"]))
    diffs.sort()
    last = len(diffs) - 1
    return diffs[int(np.floor(0.025 * last))], diffs[int(np.ceil(0.975 * last))]


@pytest.fixture()
def script(tmp_path):
    s = tmp_path / "chunks.py"
    s.write_text(EVAL)
    return s


def sweep(fam, script, out, form, key=None):
    args = ["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
            "--fractions", "0,0.5,1", "--seeds", "2", "--eval", f"{sys.executable} {script} {{model}} {fam} {form}",
            "--out", out, "--store", out.parent / "s.sqlite", "--quiet"]
    return run(args + (["--score-key", key] if key else []), check=False)


def test_the_interval_over_chunks_is_the_documented_bootstrap(family_f32, script, tmp_path):
    assert sweep(family_f32, script, tmp_path / "a", "list").returncode == 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    imp = summary["orders"]["importance"]
    assert imp["chunks"] == 8
    # The journal keeps each evaluation's chunks; the points of each curve, from it.
    lines = [json.loads(x) for x in (tmp_path / "a" / "sweep_state.jsonl").read_text().splitlines()[1:]]
    refs = {j["reference"]: j for j in lines if "reference" in j}
    assert len(refs["model"]["chunks"]) == 8
    curve = [r for r in (tmp_path / "a" / "curve.csv").read_text().splitlines()[1:]]
    by_content = {j["content"]: j for j in lines if "content" in j}
    points = {}
    for j in lines:
        if "order" in j:
            chunks = j.get("chunks") or by_content.get(j.get("content"), {}).get("chunks") or refs["model"]["chunks"]
            points.setdefault((j["order"], j["seed"]), []).append((j["x"], chunks))
    assert len(curve) == sum(len(v) for v in points.values())
    lo, hi = chunk_interval(points)
    assert imp["auc_diff_ci95_chunks"] == pytest.approx([lo, hi], rel=1e-12)
    assert lo <= imp["auc_diff_vs_random"] <= hi


def test_chunks_per_score_field_and_non_finite_chunks(family_f32, script, tmp_path):
    assert sweep(family_f32, script, tmp_path / "b", "fields", key="neg_dist").returncode == 0
    b = json.loads((tmp_path / "b" / "summary.json").read_text())["orders"]["importance"]
    assert sweep(family_f32, script, tmp_path / "a", "list").returncode == 0
    a = json.loads((tmp_path / "a" / "summary.json").read_text())["orders"]["importance"]
    assert b["auc_diff_ci95_chunks"] == pytest.approx(a["auc_diff_ci95_chunks"], rel=1e-12)  # neg_dist's list
    p = sweep(family_f32, script, tmp_path / "c", "nan")
    assert p.returncode == 2 and '"chunks" holds' in p.stderr and "not finite" in p.stderr
