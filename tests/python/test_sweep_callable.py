"""Python sweeps with an in-process evaluation: `eval=` a callable that receives the candidate's directory
(a pathlib.Path) and returns a float. Its curve equals the same score computed by a command through the
CLI; references and eval_seconds come back as tables; an exception it raises stops the sweep and
reaches the caller; the journal knows it by name, so the same function resumes.
"""
import importlib.util
import inspect
import pathlib
import sys
import textwrap

import pandas as pd
import pytest

import diffract_spectral as diffract
from conftest import run

pytest.importorskip("safetensors.numpy")

SCORE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from safetensors.numpy import load_file

    TENSOR = "model.layers.0.self_attn.q_proj.weight"

    def score(path, target):
        w = load_file(f"{path}/model.safetensors")[TENSOR].astype(np.float64)
        t = load_file(f"{target}/model.safetensors")[TENSOR].astype(np.float64)
        return -float(np.linalg.norm(w - t))

    if __name__ == "__main__":
        print(repr(score(sys.argv[1], sys.argv[2])))
    """
)


@pytest.fixture()
def scorer(tmp_path):
    path = tmp_path / "score_fn.py"
    path.write_text(SCORE)
    spec = importlib.util.spec_from_file_location("score_fn", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module.score


def test_callable_curve_equals_the_command_curve(family_f32, scorer, tmp_path):
    fam = family_f32
    script, score = scorer
    run(["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0:1:0.25",
         "--eval", f"{sys.executable} {script} {{model}} {fam / 'code'}", "--out", tmp_path / "cli", "--quiet"])
    seen = []

    def evaluate(candidate):
        seen.append(candidate)
        return score(candidate, fam / "code")

    py = diffract.sweep.interpolate(fam / "math", fam / "code", out=tmp_path / "py", omegas="0:1:0.25",
                                    eval=evaluate, quiet=True)
    cli = pd.read_csv(tmp_path / "cli" / "curve.csv")
    pd.testing.assert_series_equal(py.curve["score"], cli["score"], rtol=1e-12)
    assert py.curve["score"].iloc[-1] == 0.0 and py.curve["score"].is_monotonic_increasing
    assert (py.curve["eval_seconds"] > 0).all()
    # References (a and b as they are) and candidates, each a pathlib.Path to a directory; ω = 0 and 1 are
    # a and b byte for byte and take their scores.
    assert all(isinstance(p, pathlib.Path) for p in seen) and len(seen) == 2 + 3
    assert seen[:2] == [fam / "math", fam / "code"]
    refs = py.references.set_index("role")
    assert list(refs.index) == ["a", "b"] and refs.loc["b", "score"] == 0.0
    assert refs.loc["a", "score"] == pytest.approx(score(fam / "math", fam / "code"), rel=1e-12)
    assert (refs["eval_seconds"] > 0).all() and refs.loc["a", "path"] == str(fam / "math")
    assert py.summary["references"]["a"]["score"] == refs.loc["a", "score"]
    assert not list((tmp_path / "py" / "logs").glob("omega_*.log"))  # in-process: nothing to log

    # The same function resumes the journal: nothing is evaluated again.
    seen.clear()
    again = diffract.sweep.interpolate(fam / "math", fam / "code", out=tmp_path / "py", omegas="0:1:0.25",
                                       eval=evaluate, quiet=True)
    assert seen == []
    pd.testing.assert_frame_equal(again.curve, py.curve)


def test_an_exception_in_the_callable_stops_the_sweep(family_f32, tmp_path):
    fam = family_f32
    calls = []

    def failing(candidate):
        calls.append(candidate)
        if len(calls) == 3:
            raise ValueError(f"cannot score {candidate.name}")
        return 1.0

    with pytest.raises(ValueError, match="cannot score omega_0"):
        diffract.sweep.interpolate(fam / "math", fam / "code", out=tmp_path / "f", omegas=[0, 0.5, 1],
                                   eval=failing, quiet=True)
    assert len(calls) == 3  # a, b, then the first candidate
    assert not (tmp_path / "f" / ".candidates" / "omega_0").exists()
    with pytest.raises(TypeError):
        diffract.sweep.interpolate(fam / "math", fam / "code", out=tmp_path / "g", omegas=[0, 1],
                                   eval=lambda p: "not a number", quiet=True)
    # A callable's NaN or ±Inf is refused like a command's, never ranked or journaled as null.
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(diffract.InputError, match="not a finite number"):
            diffract.sweep.interpolate(fam / "math", fam / "code", out=tmp_path / "n", omegas=[0, 1],
                                       eval=lambda p, bad=bad: bad, quiet=True)
    with pytest.raises(TypeError, match="command string or a callable"):
        diffract.sweep.interpolate(fam / "math", fam / "code", out=tmp_path / "h", omegas=[0, 1], eval=3)


def test_select_and_report_callables(family_f32, scorer, tmp_path):
    fam = family_f32
    _, score = scorer
    py = diffract.sweep.truncate(base=fam / "pretrained", model=fam / "math", out=tmp_path / "t", keeps=[0, 0.5, 1],
                                 roles="attn_q", select_eval=lambda p: score(p, fam / "math"),
                                 report_eval=lambda p: score(p, fam / "pretrained"), quiet=True,
                                 direction="higher")  # a callable's score has no key to say it
    assert list(py.curve.columns) == ["order", "seed", "x", "score", "select_score", "report_score",
                                      "eval_seconds"]
    best = py.summary["selection"]["keep"]["curves"][0]
    assert best["x"] == 1.0  # the whole delta is the math model's own q_proj
    assert list(py.references.columns) == ["role", "score", "select_score", "report_score", "eval_seconds", "path"]
    assert py.references.set_index("role").loc["model", "select_score"] == 0.0


def test_signatures_follow_the_cli():
    sig = inspect.signature(diffract.sweep.interpolate)
    assert list(sig.parameters)[:2] == ["a", "b"]
    assert sig.parameters["out"].kind is inspect.Parameter.KEYWORD_ONLY
    for fn in (diffract.sweep.rewind, diffract.sweep.rewind_each, diffract.sweep.truncate):
        params = inspect.signature(fn).parameters
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values() if p.name != "options")
        assert "out" in params
    with pytest.raises(TypeError):
        diffract.sweep.interpolate("out_dir", "a", "b", omegas=[0, 1], eval="true")  # the old order
