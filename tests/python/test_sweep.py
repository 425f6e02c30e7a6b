"""`diffract sweep` with a small deterministic "benchmark": a Python script that loads the candidate with
safetensors and scores it as

    score = -‖W − W_math‖ over the math domain heads' Q/K/V/O blocks − ‖W − W_pre‖ over the generic heads'

so rewinding a generic head (its CPT update is the same drift in every domain) raises the score and
rewinding a domain head lowers it. The importance ordering rewinds generic heads first, so its curve
lies above the random orderings' and its AUC beats their mean.
"""

import csv
import json
import sys
import textwrap

import numpy as np
import pytest

from conftest import run

pytest.importorskip("safetensors.numpy")

EVAL = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    from safetensors.numpy import load_file

    cand, fam, generic_weight, log = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    with open(log, "a") as f:
        f.write(str(cand) + "\\n")
    planted = json.loads((fam / "planted.json").read_text())
    d = planted["hidden"] // planted["heads"]
    w, m, p = (load_file(str(x / "model.safetensors")) for x in (cand, fam / "math", fam / "pretrained"))

    def dist(a, b, layer, h):
        pre = f"model.layers.{layer}.self_attn."
        s = 0.0
        for n in ("q_proj", "k_proj", "v_proj"):
            s += np.sum((a[pre + n + ".weight"][h * d:(h + 1) * d].astype(np.float64) - b[pre + n + ".weight"][h * d:(h + 1) * d]) ** 2)
        s += np.sum((a[pre + "o_proj.weight"][:, h * d:(h + 1) * d].astype(np.float64) - b[pre + "o_proj.weight"][:, h * d:(h + 1) * d]) ** 2)
        return np.sqrt(s)

    score = -sum(dist(w, m, l, h) for l, h in planted["domain_heads"]["math"])
    score -= generic_weight * sum(dist(w, p, l, h) for l, h in planted["generic_heads"])
    print("loaded", cand.name)
    print("evaluating", cand.name, file=sys.stderr)
    print(json.dumps({"metrics": {"score": score}}))
    print(f"score {score:.12g}")
    """
)


@pytest.fixture()
def bench(tmp_path, family_f32):
    script = tmp_path / "bench.py"
    script.write_text(EVAL)
    log = tmp_path / "calls.log"

    def command(generic_weight=1.0):
        return f"{sys.executable} {script} {{model}} {family_f32} {generic_weight} {log}"

    return command, log


def trapezoid(y, x):
    """Trapezoid rule (numpy 2 renamed np.trapz to np.trapezoid)."""
    y, x = np.asarray(y, float), np.asarray(x, float)
    return float(np.sum(0.5 * (y[1:] + y[:-1]) * np.diff(x)))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def without_times(rows):
    return [{k: v for k, v in r.items() if k != "eval_seconds"} for r in rows]


def calls(log):
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_rewind_sweep_curve_auc_seed_spread_and_resume(family_f32, bench, tmp_path):
    fam = family_f32
    command, log = bench
    out = tmp_path / "sweep"
    args = ["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
            "--fractions", "0:1:0.25", "--seeds", "3", "--eval", command(), "--out", out, "--store", tmp_path / "s.sqlite"]
    run(args)
    rows = read_csv(out / "curve.csv")
    # What each point rewinds comes before its score (random orderings are matched to importance's).
    assert list(rows[0]) == ["order", "seed", "x", "query_heads", "kv_blocks", "parameters", "score", "eval_seconds"]
    assert len(rows) == 5 * (1 + 3)
    curves = {}
    for r in rows:
        curves.setdefault((r["order"], int(r["seed"])), []).append((float(r["x"]), float(r["score"])))
    assert set(curves) == {("importance", 0), ("random", 0), ("random", 1), ("random", 2)}
    # Fraction 0 (the CPT model) and 1 (every head rewound) are the same candidate in every ordering:
    # evaluated once each. 5 + 3 x 3 distinct candidates at most, and the two reference points.
    assert len({c[0][1] for c in curves.values()}) == 1 and len({c[-1][1] for c in curves.values()}) == 1
    assert calls(log) <= 2 + 2 + 4 * 3
    summary = json.loads((out / "summary.json").read_text())
    aucs = {k: trapezoid([s for _, s in v], [x for x, _ in v]) for k, v in curves.items()}
    rand = [aucs[("random", s)] for s in range(3)]
    assert summary["orders"]["importance"]["auc_mean"] == pytest.approx(aucs[("importance", 0)], rel=1e-9)
    assert summary["random"]["auc_mean"] == pytest.approx(np.mean(rand), rel=1e-9)
    assert summary["random"]["auc_std"] == pytest.approx(np.std(rand, ddof=1), rel=1e-9)
    assert summary["random"]["auc_std"] > 0  # the seeds give different orderings
    assert summary["orders"]["importance"]["auc_diff_vs_random"] == pytest.approx(aucs[("importance", 0)] - np.mean(rand), rel=1e-9)
    assert aucs[("importance", 0)] > max(rand)  # generic heads are rewound first
    assert not (out / ".candidates").exists() and not (out / "candidates").exists()

    # Resume: nothing is re-evaluated; an interrupted journal is completed from where it stopped.
    n = calls(log)
    run(args)
    assert calls(log) == n
    journal = (out / "sweep_state.jsonl").read_text().splitlines()
    (out / "sweep_state.jsonl").write_text("\n".join(journal[:-4]) + "\n" + journal[-4][:10])  # cut, mid-line
    run(args)
    assert 1 <= calls(log) - n <= 4
    assert without_times(read_csv(out / "curve.csv")) == without_times(rows)
    # A different sweep refuses to resume into the same directory.
    p = run(args[:-6] + ["--eval", command(2.0), "--out", out, "--store", tmp_path / "s.sqlite"], check=False)
    assert p.returncode == 2 and "different sweep" in p.stderr


def test_select_and_report_evaluations(family_f32, bench, tmp_path):
    fam = family_f32
    command, _ = bench
    out = tmp_path / "sel"
    run(["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
         "--orders", "importance", "--fractions", "0,0.25,0.5,1", "--select-eval", command(1.0),
         "--report-eval", command(0.5), "--score-key", "metrics.score", "--keep", "--out", out,
         "--store", tmp_path / "s.sqlite", "--quiet"])
    rows = read_csv(out / "curve.csv")
    assert list(rows[0]) == ["order", "seed", "x", "query_heads", "kv_blocks", "parameters", "score",
                             "select_score", "report_score", "eval_seconds"]
    best = max(rows, key=lambda r: float(r["select_score"]))
    sel = json.loads((out / "summary.json").read_text())["selection"]["importance"]["curves"][0]
    assert sel["x"] == float(best["x"]) and sel["report_score"] == pytest.approx(float(best["report_score"]))
    assert 0 < sel["x"] < 1
    # x = 0 rewinds nothing: it is the model itself, takes its reference's scores and is never built.
    assert sorted(p.name for p in (out / "candidates").iterdir()) == \
        ["importance_s0_x0.25", "importance_s0_x0.5", "importance_s0_x1"]
    model = json.loads((out / "summary.json").read_text())["references"]["model"]
    x0 = next(r for r in rows if float(r["x"]) == 0)
    assert float(x0["select_score"]) == model["select_score"] and float(x0["report_score"]) == model["report_score"]


def test_rewind_each_records_each_heads_effect(family_f32, bench, tmp_path):
    fam = family_f32
    command, _ = bench
    out = tmp_path / "each"
    run(["sweep", "rewind-each", "--base", fam / "pretrained", "--model", fam / "math", "--eval", command(),
         "--out", out, "--store", tmp_path / "s.sqlite", "--quiet"])
    rows = read_csv(out / "heads_effect.csv")
    planted = json.loads((fam / "planted.json").read_text())
    assert len(rows) == planted["layers"] * planted["heads"]
    delta = {(int(r["layer"]), int(r["head"])): float(r["delta"]) for r in rows}
    for lh in planted["generic_heads"]:
        assert delta[tuple(lh)] > 0
    for lh in planted["domain_heads"]["math"]:
        assert delta[tuple(lh)] < 0
    greedy0 = next(r for r in rows if r["greedy_rank"] == "0")
    assert float(greedy0["delta"]) == max(delta.values())


def test_truncate_and_interpolate_sweeps(family_f32, bench, tmp_path):
    fam = family_f32
    command, _ = bench
    run(["sweep", "truncate", "--base", fam / "pretrained", "--model", fam / "math", "--keeps", "0,0.5,1",
         "--roles", "attn_q,attn_k,attn_v,attn_o", "--eval", command(), "--out", tmp_path / "tr", "--quiet"])
    tr = read_csv(tmp_path / "tr" / "curve.csv")
    assert [(r["order"], float(r["x"])) for r in tr] == [("keep", 0.0), ("keep", 0.5), ("keep", 1.0)]
    run(["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0:1:0.5", "--eval", command(0.0),
         "--out", tmp_path / "ip", "--quiet"])
    ip = read_csv(tmp_path / "ip" / "curve.csv")
    assert float(ip[0]["score"]) == 0.0  # ω = 0 is the math model itself, byte for byte
    assert float(ip[2]["score"]) < float(ip[1]["score"]) < 0
    s = json.loads((tmp_path / "ip" / "summary.json").read_text())
    assert s["orders"]["omega"]["auc_mean"] == pytest.approx(trapezoid([float(r["score"]) for r in ip], [0, 0.5, 1]))


def test_auc_difference_has_a_bootstrap_interval_and_a_rank_p_value(family_f32, bench, tmp_path):
    """summary.json's uncertainty (issue 34, item 2) against a brute-force computation from curve.csv:
    the exact bootstrap over the random orderings (every resample of the n AUCs, n^n of them) and the
    two-sided rank p-value."""
    import itertools
    import math

    fam = family_f32
    command, _ = bench
    out = tmp_path / "sweep"
    run(["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
         "--fractions", "0:1:0.25", "--seeds", "4", "--eval", command(), "--out", out, "--store", tmp_path / "s.sqlite",
         "--quiet"])
    curves = {}
    for r in read_csv(out / "curve.csv"):
        curves.setdefault((r["order"], int(r["seed"])), []).append((float(r["x"]), float(r["score"])))
    aucs = {k: trapezoid([s for _, s in v], [x for x, _ in v]) for k, v in curves.items()}
    imp = aucs[("importance", 0)]
    rand = [aucs[("random", s)] for s in range(4)]
    diffs = sorted(imp - sum(pick) / 4 for pick in itertools.product(rand, repeat=4))
    last = len(diffs) - 1
    want_ci = [diffs[math.floor(0.025 * last)], diffs[math.ceil(0.975 * last)]]
    ge, le = 1 + sum(r >= imp for r in rand), 1 + sum(r <= imp for r in rand)
    want_p = min(1.0, 2 * min(ge, le) / 5)
    got = json.loads((out / "summary.json").read_text())["orders"]["importance"]
    assert got["auc_diff_ci95"] == pytest.approx(want_ci, rel=1e-12, abs=1e-12)
    assert got["auc_diff_ci95"][0] <= got["auc_diff_vs_random"] <= got["auc_diff_ci95"][1]
    assert got["p_value_vs_random"] == pytest.approx(want_p)
    assert got["random_orderings"] == 4
    assert "cannot go below 0.4" in got["note"]
