"""Issue 34: `diffract sweep validate` checks the head ranking in one command, on the synthetic family
and the deterministic bench of test_sweep.py (rewinding a math-domain head lowers the score, a generic
head raises it, an untouched head leaves it). Checked by hand:
- each head's harm is the score lost by rewinding it alone: the negated delta of `sweep rewind-each`;
- its importance is compare's (heads.csv), the Spearman rho is scipy's over (importance, harm), and the
  bootstrap interval and permutation p-value are recomputed here from the documented seeded streams
  (splitmix64, stream_seed): the same resamples, the same numbers;
- the random sets rewind exactly as much weight as the set they are matched to;
- with a second reference, Kendall's tau-b is scipy's between the two importance columns;
- --direction lower turns the same scores into the opposite verdict;
- Python's diffract.sweep.validate writes and returns the same.
"""
import csv
import json
import warnings

import numpy as np
import pytest

import diffract_spectral as diffract
from conftest import run
from test_sweep import bench  # noqa: F401  (fixture)

stats = pytest.importorskip("scipy.stats")
M = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31), state


def stream_seed(seed, a, b=""):
    h = 0xCBF29CE484222325 ^ seed
    for c in a.encode():
        h = ((h ^ c) * 0x100000001B3) & M
    h = ((h ^ 0xFF) * 0x100000001B3) & M
    for c in b.encode():
        h = ((h ^ c) * 0x100000001B3) & M
    return h


def spearman(x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return stats.spearmanr(x, y).statistic


def bootstrap(x, y, draws=2000, seed=0):
    state, values, n = stream_seed(seed, "pair-bootstrap"), [], len(x)
    for _ in range(draws):
        idx = []
        for _ in range(n):
            v, state = splitmix64(state)
            idx.append(v % n)
        r = spearman([x[i] for i in idx], [y[i] for i in idx])
        if np.isfinite(r):
            values.append(r)
    values.sort()
    last = len(values) - 1
    return values[int(np.floor(0.025 * last))], values[int(np.ceil(0.975 * last))]


def permutation_p(x, y, draws=2000, seed=0):
    state, observed, y, hits = stream_seed(seed, "pair-permutation"), spearman(x, y), list(y), 0
    for _ in range(draws):
        for i in range(len(y), 1, -1):  # Fisher-Yates from the back
            v, state = splitmix64(state)
            j = v % i
            y[i - 1], y[j] = y[j], y[i - 1]
        r = spearman(x, y)
        hits += bool(np.isfinite(r) and r >= observed - 1e-12 * abs(observed))
    return (1 + hits) / (1 + draws)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def validate(fam, command, out, store, *extra):
    # The bench prints "score X" last: no key says which scores are better, so the direction is given.
    direction = [] if "--direction" in extra else ["--direction", "higher"]
    return run(["sweep", "validate", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
                *direction, *extra, "--eval", command(), "--out", out, "--store", store])


def test_validate_against_rewind_each_scipy_and_the_seeded_streams(family_f32, bench, tmp_path):  # noqa: F811
    fam, (command, _) = family_f32, bench
    store = tmp_path / "s.sqlite"
    p = validate(fam, command, tmp_path / "v", store, "--reference", fam / "code", "--seeds", "4")
    rows = read_csv(tmp_path / "v" / "heads_validation.csv")
    summary = json.loads((tmp_path / "v" / "summary.json").read_text())
    assert len(rows) == summary["heads"] == 8 and summary["k"] == 2 and summary["direction"] == "higher"

    # Harm per head = -(rewind-each's delta); importance = compare's.
    run(["sweep", "rewind-each", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
         "--eval", command(), "--out", tmp_path / "each", "--store", store, "--quiet"])
    delta = {(r["layer"], r["head"]): float(r["delta"]) for r in read_csv(tmp_path / "each" / "heads_effect.csv")}
    run(["compare", "--base", fam / "pretrained", fam / "math", "--reference", fam / "text", "--out", tmp_path / "c",
         "--store", store, "--quiet"])
    importance = {(r["layer"], r["head"]): float(r["importance"]) for r in read_csv(tmp_path / "c" / "heads.csv")
                  if r["model"] == "math"}
    for r in rows:
        key = (r["layer"], r["head"])
        assert float(r["harm"]) == pytest.approx(-delta[key], abs=1e-9)
        assert float(r["importance"]) == pytest.approx(importance[key], rel=1e-12, abs=1e-15)
    x, y = [float(r["importance"]) for r in rows], [float(r["harm"]) for r in rows]
    pred = summary["predictive"]
    assert pred["spearman"] == pytest.approx(spearman(x, y), rel=1e-12)
    assert pred["spearman"] > 0.8  # domain heads are both the most important and the costliest to rewind
    assert pred["ci95"] == pytest.approx(list(bootstrap(x, y)), rel=1e-12)
    assert pred["p_value"] == pytest.approx(permutation_p(x, y), rel=1e-12)
    assert summary["verdict"][0].startswith("the ranking predicts what rewinding one head does: Spearman")
    assert "sweep validate: the ranking predicts" in p.stderr

    # Sets: the least and most important k, each with random sets rewinding the same weight.
    sets = read_csv(tmp_path / "v" / "sets.csv")
    assert [s["set"] for s in sets[:2]] == ["bottom", "top"] and len(sets) == 2 + 2 * 4
    by_rank = sorted(rows, key=lambda r: int(r["rank"]))
    bottom = {(r["layer"], r["head"]) for r in by_rank[:2]}
    assert all(float(r["importance"]) <= min(float(t["importance"]) for t in by_rank[2:]) for r in by_rank[:2])
    assert bottom and float(sets[1]["harm"]) > float(sets[0]["harm"])  # the most important cost more
    for s in sets[2:]:
        matched = sets[0] if s["set"] == "random_bottom" else sets[1]
        assert (s["query_heads"], s["kv_blocks"], s["parameters"]) == \
            (matched["query_heads"], matched["kv_blocks"], matched["parameters"])

    # Stability: Kendall tau-b between the two importance columns, as scipy computes it.
    a = [float(r["importance"]) for r in rows]
    b = [float(r["importance_second"]) for r in rows]
    assert summary["stability"]["kendall_tau"] == pytest.approx(stats.kendalltau(a, b).statistic, rel=1e-12)
    assert len(summary["verdict"]) == 4 and "reference domain" in summary["verdict"][3]


def test_direction_lower_reverses_the_verdict_and_python_writes_the_same(family_f32, bench, tmp_path):  # noqa: F811
    fam, (command, _) = family_f32, bench
    store = tmp_path / "s.sqlite"
    validate(fam, command, tmp_path / "hi", store)
    validate(fam, command, tmp_path / "lo", store, "--direction", "lower")
    hi = json.loads((tmp_path / "hi" / "summary.json").read_text())
    lo = json.loads((tmp_path / "lo" / "summary.json").read_text())
    assert lo["predictive"]["spearman"] == pytest.approx(-hi["predictive"]["spearman"], rel=1e-12)
    assert lo["verdict"][0].startswith("the ranking predicts the opposite of its claim")
    assert "stability" not in hi
    r = diffract.sweep.validate(base=fam / "pretrained", model=fam / "math", reference=fam / "text",
                                eval=command(), out=tmp_path / "py", store=store, quiet=True, direction="higher")
    assert (tmp_path / "py" / "heads_validation.csv").read_text() == (tmp_path / "hi" / "heads_validation.csv").read_text()
    assert list(r.heads_validation["harm"]) == [float(x["harm"]) for x in read_csv(tmp_path / "hi" / "heads_validation.csv")]
    assert list(r.sets["set"][:2]) == ["bottom", "top"] and r.verdict == hi["verdict"] and r.curve is None
    with pytest.raises(diffract.InputError, match="direction="):
        diffract.sweep.validate(base=fam / "pretrained", model=fam / "math", eval=command(), out=tmp_path / "bad",
                                direction="up", store=store)
