"""`diffract metrics` covers every table's fields and fits 100 columns; `diffract completion` completes
the commands and options that exist (issue 31, items 4 and 7).

Independent facts: the columns of real metrics.csv, compare.csv and heads.csv files, and bash itself
running the completion function.
"""

import csv
import json
import shutil
import subprocess

import pytest

from conftest import assert_input_error, binary, run

IDENTITY = {"model", "base", "reference", "tensor", "component", "layer", "role", "expert", "expert_kind", "head", "rows",
            "cols", "nonfinite_count", "precision", "kv_head", "kv_group_size", "scale_scope", "order", "seed"}


def listed(table):
    return {f["name"] for f in json.loads(run(["metrics", "--table", table, "--json"]).stdout)}


def columns(path):
    with open(path, newline="") as f:
        return set(next(csv.reader(f)))


@pytest.fixture(scope="module")
def tables(family_f32, tmp_path_factory):
    t = tmp_path_factory.mktemp("tables")
    fam = family_f32
    run(["analyze", fam / "math", "--out", t / "an", "--store", t / "s.sqlite", "--metrics", "all", "--quiet"])
    run(["compare", "--base", fam / "pretrained", fam / "math", "--reference", fam / "text", "--out", t / "cmp",
         "--store", t / "s.sqlite", "--quiet"])
    return t


def test_every_table_column_is_in_the_catalog(tables):
    assert columns(tables / "an" / "metrics.csv") - IDENTITY <= listed("metrics")
    assert columns(tables / "cmp" / "compare.csv") - IDENTITY <= listed("compare")
    assert columns(tables / "cmp" / "heads.csv") - IDENTITY == listed("heads")


@pytest.mark.parametrize("table", ["metrics", "compare", "heads"])
def test_the_text_fits_100_columns(table):
    text = run(["metrics", "--table", table]).stdout
    assert text and max(len(line) for line in text.splitlines()) <= 100


def test_fields_are_filtered_and_mistakes_named():
    text = run(["metrics", "stable_rank", "frob_norm"]).stdout
    names = [line.split()[0] for line in text.splitlines() if not line.startswith(" ")]
    assert names == ["stable_rank", "frob_norm"]
    p = run(["metrics", "stabel_rank"], check=False)
    assert_input_error(p, "no field 'stabel_rank'", "did you mean 'stable_rank'")
    p = run(["metrics", "--table", "nope"], check=False)
    assert_input_error(p, "--table")


def complete(line):
    """What bash's completion offers for `line` (the word being completed is the last, maybe empty)."""
    script = run(["completion", "bash"]).stdout
    words = line.split(" ")
    prog = script + "\nCOMP_WORDS=(" + " ".join(f"'{w}'" for w in words) + f")\nCOMP_CWORD={len(words) - 1}\n" \
        "_diffract\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
    p = subprocess.run(["bash", "-c", prog], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return set(p.stdout.split())


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_offers_what_exists():
    assert complete("diffract an") == {"analyze"}
    assert {"rewind", "truncate", "interpolate"} <= complete("diffract edit ")
    assert "--keep" in complete("diffract edit truncate --")
    assert "--store" not in complete("diffract edit truncate --")
    assert "--eval-timeout" in complete("diffract sweep rewind --eval")


def test_zsh_and_fish_scripts_name_every_command():
    commands = json.loads(json.dumps(["analyze", "compare", "edit", "sweep", "report", "metrics", "store"]))
    for shell in ("zsh", "fish"):
        text = run(["completion", shell]).stdout
        assert all(c in text for c in commands), shell
    assert "bashcompinit" in run(["completion", "zsh"]).stdout
    p = run(["completion", "tcsh"], check=False)
    assert_input_error(p, "bash, zsh or fish")


def test_every_metric_says_what_it_costs():
    """Issue 36: `diffract metrics` lists each field's cost per matrix, so that a user sees what is
    expensive before asking for it: the SVDs, the permutation null (per --null-draws), bootstrap refits (per
    --p-value-draws / --alpha-ci). What the kernels really run decides the text: a field whose computation
    makes resampling draws names the option that sets them."""
    fields = {f["name"]: f for f in json.loads(run(["metrics", "--json"]).stdout)}
    for name, f in fields.items():
        if f["level"] == "PARAMETER":
            assert f["cost"], name
    cost = {name: " ".join(f["cost"]) for name, f in fields.items()}
    for name in ("pl_p_value", "tpl_p_value", "expon_p_value"):
        assert "--p-value-draws" in cost[name] and "singular values" in cost[name], cost[name]
    assert "--alpha-ci" in cost["pl_alpha_ci_low"]
    for name in ("w1_rand_distance", "esd_rand_max", "mp_soft_rank"):
        assert "--null-draws" in cost[name], (name, cost[name])
    assert "--null-draws" not in cost["pl_alpha"] and "--p-value-draws" not in cost["pl_alpha"]
    assert "singular vectors" in cost["weights_lsvs"]
    assert cost["greater_dim"] == "none beyond reading the shape"
    text = run(["metrics", "tpl_p_value"]).stdout
    assert "cost: the singular values" in text and "--p-value-draws" in text
