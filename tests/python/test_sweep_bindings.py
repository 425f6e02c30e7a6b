"""`diffract.sweep` (the Python binding of `diffract sweep`) against the CLI: the same sweep run both ways,
with test_sweep.py's deterministic evaluation script, gives the same curve and summary; a sweep started by
one resumes with the other; bad options raise diffract.InputError with the CLI's message.

The module must be importable: scripts/test.sh runs `pip install .` before the suite.
"""
import inspect
import json
import sys

import pandas as pd
import pytest

import diffract_spectral as diffract
from diffract_spectral._tables import COUNT_COLUMNS
from conftest import run

pytest.importorskip("safetensors.numpy")

from test_sweep import EVAL, calls  # noqa: E402  (the deterministic "benchmark")


@pytest.fixture()
def bench(tmp_path, family_f32):
    script = tmp_path / "bench.py"
    script.write_text(EVAL)
    log = tmp_path / "calls.log"
    return f"{sys.executable} {script} {{model}} {family_f32} 1.0 {log}", log


def untimed_text(path):
    """A CSV's text without its last column (eval_seconds: wall time, different in every run)."""
    lines = open(path).read().splitlines()
    assert lines[0].endswith(",eval_seconds")
    return [line.rsplit(",", 1)[0] for line in lines]


def untimed_summary(summary):
    for ref in summary.get("references", {}).values():
        assert ref.pop("eval_seconds") > 0
    return summary


def same_outputs(py, cli_out, table="curve.csv"):
    """The SweepResult `py` holds what the CLI wrote to cli_out, and wrote the same files (but the times)."""
    out = py.out
    assert untimed_text(cli_out / table) == untimed_text(f"{out}/{table}")
    cli_summary = json.loads((cli_out / "summary.json").read_text())
    assert untimed_summary(json.loads(json.dumps(py.summary))) == untimed_summary(cli_summary)
    expected = pd.read_csv(cli_out / table).drop(columns="eval_seconds")
    # The package's tables hold layer, head and the counts as pandas' nullable Int64 (diffract._table).
    expected = expected.astype({c: "Int64" for c in ("layer", "head", *COUNT_COLUMNS) if c in expected})
    got = py.heads_effect if table == "heads_effect.csv" else py.curve
    assert (got["eval_seconds"] > 0).all()
    # parsers may differ by an ulp
    pd.testing.assert_frame_equal(got.drop(columns="eval_seconds"), expected, check_exact=False, rtol=1e-14)
    assert list(py.references["role"]) == list(cli_summary["references"])
    assert list(py.references["score"]) == [r["score"] for r in cli_summary["references"].values()]
    # The same journal fingerprint: either can resume the other's sweep.
    first = (cli_out / "sweep_state.jsonl").read_text().splitlines()[0]
    assert open(f"{out}/sweep_state.jsonl").readline().rstrip("\n") == first


def test_rewind_sweep_equals_cli_and_resumes_it(family_f32, bench, tmp_path):
    fam = family_f32
    command, log = bench
    store = tmp_path / "s.sqlite"
    run(["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
         "--orders", "importance,random", "--fractions", "0:1:0.25", "--seeds", "2", "--seed", "3",
         "--scale-scope", "layer", "--eval", command, "--out", tmp_path / "cli", "--store", store, "--quiet"])
    py = diffract.sweep.rewind(out=tmp_path / "py", base=fam / "pretrained", model=fam / "math", reference=fam / "text",
                               orders=["importance", "random"], fractions="0:1:0.25", seeds=2, seed=3,
                               scale_scope="layer", eval=command, store=store, quiet=True)
    assert isinstance(py.curve, pd.DataFrame) and py.heads_effect is None
    assert list(py.curve.columns) == ["order", "seed", "x", "query_heads", "kv_blocks", "parameters", "score",
                                      "eval_seconds"] and len(py.curve) == 5 * 3
    assert set(zip(py.curve["order"], py.curve["seed"])) == {("importance", 0), ("random", 3), ("random", 4)}
    assert py.summary["sweep"] == "rewind" and set(py.summary["orders"]) == {"importance", "random"}
    same_outputs(py, tmp_path / "cli")

    # Python resumes the CLI's sweep: nothing is evaluated again.
    n = calls(log)
    again = diffract.sweep.rewind(out=tmp_path / "cli", base=fam / "pretrained", model=fam / "math",
                                  reference=fam / "text", fractions="0:1:0.25", seeds=2, seed=3,
                                  scale_scope="layer", eval=command, store=store, quiet=True)
    assert calls(log) == n
    pd.testing.assert_frame_equal(again.curve.drop(columns="eval_seconds"), py.curve.drop(columns="eval_seconds"))
    # The times come back from the journal: those of the CLI's own evaluations.
    assert list(again.curve["eval_seconds"]) == list(pd.read_csv(tmp_path / "cli" / "curve.csv")["eval_seconds"])


def test_truncate_sweep_equals_cli(family_f32, bench, tmp_path):
    fam = family_f32
    command, _ = bench
    run(["sweep", "truncate", "--base", fam / "pretrained", "--model", fam / "math", "--keeps", "0,0.5,1",
         "--per-head", "--roles", "attn_q,attn_o", "--eval", command, "--out", tmp_path / "cli", "--quiet"])
    py = diffract.sweep.truncate(out=tmp_path / "py", base=diffract.open(fam / "pretrained"), model=fam / "math",
                                 keeps=[0, 0.5, 1], per_head=True, roles=["attn_q", "attn_o"], eval=command,
                                 quiet=True)
    assert list(py.curve["order"]) == ["keep"] * 3 and list(py.curve["x"]) == [0, 0.5, 1]
    assert py.summary["sweep"] == "truncate"
    same_outputs(py, tmp_path / "cli")


def test_rewind_each_equals_cli(family_f32, bench, tmp_path):
    fam = family_f32
    command, _ = bench
    store = tmp_path / "s.sqlite"
    run(["sweep", "rewind-each", "--base", fam / "pretrained", "--model", fam / "math", "--eval", command,
         "--out", tmp_path / "cli", "--store", store, "--quiet"])
    py = diffract.sweep.rewind_each(out=tmp_path / "py", base=fam / "pretrained", model=fam / "math", eval=command,
                                    store=store, quiet=True)
    assert py.curve is None
    assert list(py.heads_effect.columns) == ["layer", "head", "score", "delta", "greedy_rank", "eval_seconds"]
    same_outputs(py, tmp_path / "cli", "heads_effect.csv")


def cli_error(args):
    p = run(args, check=False)
    assert p.returncode == 2, p.stderr
    prefix = "diffract: error: "
    line = next(x for x in p.stderr.splitlines() if x.startswith(prefix))
    return line[len(prefix):]


@pytest.mark.parametrize("option,value,cli", [
    ("orders", "importance,bogus", ["--orders", "importance,bogus"]),
    ("seeds", 0, ["--seeds", "0"]),
    ("fractions", "0:1:0", ["--fractions", "0:1:0"]),
    ("kv_policy", "some", ["--kv-policy", "some"]),
    ("max_shard_size", "5X", ["--max-shard-size", "5X"]),
])
def test_bad_options_raise_the_clis_message(family_f32, tmp_path, option, value, cli):
    """The CLI's message, its options named as the Python arguments (issue 51: --orders → orders=)."""
    from diffract_spectral._keywords import python_names

    fam = family_f32
    common = ["--base", fam / "pretrained", "--model", fam / "math", "--eval", "true", "--quiet"]
    message = cli_error(["sweep", "rewind", *common, *cli, "--out", tmp_path / "cli"])
    with pytest.raises(diffract.InputError) as e:
        diffract.sweep.rewind(out=tmp_path / "py", base=fam / "pretrained", model=fam / "math", eval="true", quiet=True,
                              **{option: value})
    assert str(e.value) == python_names(message) and f"{option}=" in str(e.value)
    message = cli_error(["sweep", "truncate", "--base", fam / "pretrained", "--model", fam / "math", "--keeps", "a",
                         "--eval", "true", "--out", tmp_path / "cli2"])
    with pytest.raises(diffract.InputError) as e:
        diffract.sweep.truncate(out=tmp_path / "py2", base=fam / "pretrained", model=fam / "math", keeps="a", eval="true")
    assert str(e.value) == python_names(message) and "keeps=" in str(e.value)


def test_in_memory_models_are_refused(family_f32, tmp_path):
    ck = diffract.from_arrays({"w": diffract.open(family_f32 / "math")["model.layers.0.self_attn.q_proj.weight"]})
    with pytest.raises(diffract.InputError, match="in-memory models cannot be swept"):
        diffract.sweep.interpolate(ck, family_f32 / "math", out=tmp_path / "i", omegas=[0, 1], eval="true")


def test_every_sweep_function_has_a_docstring():
    assert "sweep" in diffract.__all__ and inspect.getdoc(diffract.sweep)
    missing = [n for n in diffract.sweep.__all__ if not (inspect.getdoc(getattr(diffract.sweep, n)) or "").strip()]
    assert not missing, missing
