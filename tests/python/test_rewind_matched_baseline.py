"""The importance-vs-random comparison rewinds like for like under GQA (issue 34, item 1): random
orderings are matched to the importance ordering's structure (as many query heads in as many key/value
groups at each x), so both rewind the same query heads, K/V blocks and weight entries; curve.csv says
how much each point rewinds; orderings that rewind different amounts at one x are warned about.

Independent facts: the parameter count from the model's geometry (head_dim x hidden per Q or O block
of a query head, per K or V block of a key/value head), and the rewound heads each candidate lists.
"""

import csv
from collections import defaultdict

import pytest

from conftest import run

HIDDEN, HEADS, KV = 128, 8, 2
HEAD_DIM = HIDDEN // HEADS


@pytest.fixture(scope="module")
def gqa(tmp_path_factory):
    out = tmp_path_factory.mktemp("gqa") / "fam"
    run(["generate", "--out", out, "--dtype", "F32", "--layers", "2", "--hidden", HIDDEN, "--heads", HEADS,
         "--kv-heads", KV, "--intermediate", "256", "--vocab", "512", "--domain-heads", "2", "--generic-heads", "2"])
    return out


def sweep(fam, out, *extra):
    return run(["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
                "--fractions", "0:1:0.125", "--seeds", "4", "--eval", "echo 1", "--out", out, "--store",
                out.parent / "s.sqlite", "--keep", *extra])


def rows(out):
    with open(out / "curve.csv", newline="") as f:
        return list(csv.DictReader(f))


def expected_parameters(q_heads, kv_blocks):
    return q_heads * 2 * HEAD_DIM * HIDDEN + kv_blocks * 2 * HEAD_DIM * HIDDEN  # Q rows + O columns; K + V rows


@pytest.mark.parametrize("kv_policy", ["all", "any"])
def test_random_orderings_rewind_what_importance_rewinds(gqa, tmp_path, kv_policy):
    out = tmp_path / "s"
    p = sweep(gqa, out, "--kv-policy", kv_policy)
    assert "rewind different amounts" not in p.stderr
    by_x = defaultdict(set)
    for r in rows(out):
        amount = (int(r["query_heads"]), int(r["kv_blocks"]), int(r["parameters"]))
        assert amount[2] == expected_parameters(amount[0], amount[1]), r
        by_x[r["x"]].add(amount)
    assert all(len(a) == 1 for a in by_x.values()), by_x  # every ordering and seed alike at each x
    # The random sets are random: at a middle x the seeds rewind different heads.
    sets = {(out / "candidates" / f"random_s{s}_x0.5" / "rewound_heads.csv").read_text() for s in range(4)}
    assert len(sets) > 1


def test_unmatched_orderings_are_warned_about(gqa, tmp_path):
    out = tmp_path / "s"
    p = sweep(gqa, out, "--orders", "importance,agreement")
    amounts = defaultdict(set)
    for r in rows(out):
        amounts[r["x"]].add(int(r["parameters"]))
    differing = [x for x, a in amounts.items() if len(a) > 1]
    assert ("rewind different amounts" in p.stderr) == bool(differing)
    for x in differing:
        assert f"at x = {x} " in p.stderr
