"""The Python package's everyday habits (issue 19): arguments in the CLI's order and names, integer layer
and head columns, progress=True as tqdm bars, no nanobind leak reports at exit, and one version for the
CLI and the package."""
import importlib.metadata
import inspect
import os
import re
import subprocess
import sys
import types

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import load_file

import diffract_spectral as diffract
from conftest import ROOT, run

EDITS = ["rewind", "truncate", "transplant", "permute", "interpolate", "merge"]


def tensors(out):
    """An edited directory's tensors."""
    return {k: v for f in sorted(out.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


# --- arguments follow the CLI ------------------------------------------------------------------


def test_interpolate_takes_the_clis_order(family_f32, tmp_path):
    f = family_f32
    # `diffract edit interpolate A B --omega 0 --out DIR`: omega 0 is A byte for byte.
    s = diffract.edit.interpolate(f / "pretrained", f / "math", omega=0, out=tmp_path / "i")
    assert s["edited"] == 0 and s["copied"] > 0
    pre, got = tensors(f / "pretrained"), tensors(tmp_path / "i")
    assert set(got) == set(pre) and all(np.array_equal(got[k], pre[k]) for k in pre)
    with pytest.raises(TypeError):  # the former order (out first) fails loudly instead of misreading
        diffract.edit.interpolate(tmp_path / "j", f / "pretrained", f / "math", omega=0.5)


def test_signatures_mirror_the_cli():
    """The CLI's positionals are the only positional parameters; every option, --out included, is a
    keyword of the same name."""
    positional = {"analyze": ["models"], "compare": ["models"], "generate": [], "edit.interpolate": ["a", "b"]}
    functions = {"analyze": diffract.analyze, "compare": diffract.compare, "generate": diffract.generate}
    functions.update({f"edit.{n}": getattr(diffract.edit, n) for n in EDITS})
    for name, fn in functions.items():
        params = inspect.signature(fn).parameters.values()
        pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        assert pos == positional.get(name, []), name
        out = inspect.signature(fn).parameters["out"]
        assert out.kind == out.KEYWORD_ONLY, name
        if name.startswith("edit.") or name == "generate":  # --out is required there, as in the CLI
            assert out.default is inspect.Parameter.empty, name
    assert inspect.signature(diffract.compare).parameters["base"].kind == inspect.Parameter.KEYWORD_ONLY


# --- integer layer and head columns ------------------------------------------------------------


def test_layer_and_head_are_nullable_integers(family_f32, tmp_path):
    f = family_f32
    res = diffract.analyze(f / "math", metrics="l2_norm", store=tmp_path / "s.sqlite")
    cmp = diffract.compare(f / "math", base=f / "pretrained", reference=f / "text", store=tmp_path / "s.sqlite")
    for table in [res.metrics, cmp.matrices, cmp.heads]:
        assert str(table["layer"].dtype) == "Int64" and str(table["head"].dtype) == "Int64"
    m = res.metrics
    # Whole matrices have no head (<NA>), head rows an integer head; values as in the CLI's CSV.
    assert m["head"].isna().any() and m["head"].notna().any()
    heads = m[m["head"].notna()]
    assert all(isinstance(v, (int, np.integer)) for v in heads["head"]) and heads["head"].min() == 0
    q = m[m["tensor"].str.contains("layers.1.self_attn.q_proj") & m["head"].isna()]
    assert list(q["layer"]) == [1]
    assert cmp.heads["layer"].notna().all() and sorted(set(cmp.heads["head"])) == [0, 1, 2, 3]
    # An all-missing column (no per-head rows) is Int64 too, all <NA>.
    whole = diffract.analyze(f / "math", metrics="l2_norm", heads=False, store=tmp_path / "s.sqlite").metrics
    assert str(whole["head"].dtype) == "Int64" and whole["head"].isna().all()


def test_every_table_types_layer_and_head_in_one_place():
    """diffract._table is the one constructor (sweeps' heads_effect goes through it too)."""
    df = diffract._table({"layer": [0, 1], "head": [3, None], "score": [0.5, 0.25]})
    assert [str(df[c].dtype) for c in ["layer", "head", "score"]] == ["Int64", "Int64", "float64"]
    assert df["head"].isna().tolist() == [False, True]
    src = (ROOT / "python" / "diffract_spectral" / "sweep.py").read_text()
    assert "_table" in src and "DataFrame(" not in src


# --- progress ----------------------------------------------------------------------------------


class FakeTqdm:
    """Records what diffract asks of a tqdm bar."""
    bars = []

    def __init__(self, total, desc, unit):
        self.total, self.desc, self.n, self.updates, self.closed = total, desc, 0, [], False
        FakeTqdm.bars.append(self)

    def update(self, k):
        self.n += k
        self.updates.append(self.n)

    def close(self):
        self.closed = True


@pytest.fixture
def fake_tqdm(monkeypatch):
    """`from tqdm.auto import tqdm` gives FakeTqdm."""
    FakeTqdm.bars = []
    package, auto = types.ModuleType("tqdm"), types.ModuleType("tqdm.auto")
    auto.tqdm = FakeTqdm
    package.auto = auto
    monkeypatch.setitem(sys.modules, "tqdm", package)
    monkeypatch.setitem(sys.modules, "tqdm.auto", auto)
    return FakeTqdm


def test_progress_updates_a_tqdm_bar_to_its_total(family_f32, tmp_path, fake_tqdm):
    f = family_f32
    res = diffract.analyze([f / "pretrained", f / "math"], store=tmp_path / "s.sqlite", progress=True, threads=2)
    [bar] = fake_tqdm.bars
    assert bar.desc == "diffract analyze" and bar.total == res.computed > 0
    assert bar.n == bar.total and bar.closed and bar.updates == sorted(bar.updates)

    fake_tqdm.bars.clear()
    diffract.compare(f / "math", base=f / "pretrained", store=tmp_path / "c.sqlite", progress=True)
    [bar] = fake_tqdm.bars
    assert bar.desc == "diffract compare" and bar.total > 0 and bar.n == bar.total and bar.closed

    fake_tqdm.bars.clear()  # rewind by fraction: the ranking's compare, then the edit (one bar each)
    s = diffract.edit.rewind(base=f / "pretrained", model=f / "math", out=tmp_path / "r", fraction=0.25,
                             store=tmp_path / "c.sqlite", progress=True)
    assert [b.desc for b in fake_tqdm.bars] == ["diffract compare", "diffract edit"]
    edit_bar = fake_tqdm.bars[1]
    assert edit_bar.total == s["edited"] + s["copied"] == edit_bar.n
    assert all(b.closed and b.n == b.total for b in fake_tqdm.bars)

    fake_tqdm.bars.clear()
    diffract.analyze(f / "math", store=tmp_path / "s.sqlite")  # progress off: no bar
    assert fake_tqdm.bars == []


def test_progress_counts_the_resampling_draws(tmp_path, fake_tqdm):
    # One heavy-tailed matrix; two p-values of 20 draws and an alpha CI of 10: the bar counts the matrix
    # and each draw (issue 16: resampling fields show progress), and ends at its total.
    w = np.random.default_rng(16).standard_t(2.5, size=(400, 800)).astype(np.float32)
    res = diffract.analyze(diffract.from_arrays({"layer.weight": w}), metrics="pl_p_value,expon_p_value,pl_alpha_ci_low",
                           heads=False, p_value_draws=20, alpha_ci=10, store=tmp_path / "s.sqlite", progress=True)
    [bar] = fake_tqdm.bars
    assert res.computed == 1
    assert bar.total == 1 + 2 * 20 + 10 == bar.n and bar.closed
    assert bar.updates == sorted(bar.updates)


def test_sweep_progress_counts_its_evaluations(family_f32, tmp_path, fake_tqdm, capfd):
    f = family_f32
    res = diffract.sweep.interpolate(f / "pretrained", f / "math", omegas="0:1:0.5", out=tmp_path / "sw",
                                     eval=lambda path: float(len(str(path))), progress=True)
    [bar] = fake_tqdm.bars
    # Two references (a, b) and three ω, of which ω = 0 and 1 are a and b byte for byte: they take the
    # references' scores, so only ω = 0.5 is evaluated.
    assert bar.desc == "diffract sweep" and bar.total == 2 + 1 == bar.n and bar.closed
    refs = res.references.set_index("role")["score"]
    assert list(res.curve["score"]) == [refs["a"], float(len(str(tmp_path / "sw" / ".candidates" / "omega_0.5"))),
                                        refs["b"]]
    assert bar.updates == sorted(bar.updates)
    assert "ETA" not in capfd.readouterr().err  # the bar replaces the engine's lines
    assert len(res.curve["x"]) == 3


def test_progress_without_tqdm_prints_lines(family_f32, tmp_path, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    s = diffract.edit.permute(model=family_f32 / "math", out=tmp_path / "p", progress=True)
    total = s["edited"] + s["copied"]
    lines = capfd.readouterr().err.strip().splitlines()
    assert lines[0] == f"diffract edit: 0/{total}" and lines[-1] == f"diffract edit: {total}/{total}"
    assert len(lines) <= 11  # one per tenth of the work


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_failing_progress_display_does_not_stop_the_run(family_f32, tmp_path, fake_tqdm, monkeypatch):
    def broken(self, k):
        raise RuntimeError("display gone")

    monkeypatch.setattr(FakeTqdm, "update", broken)
    res = diffract.analyze(family_f32 / "math", metrics="l2_norm", store=tmp_path / "s.sqlite", progress=True)
    assert res.computed > 0 and fake_tqdm.bars[0].closed


# --- no leak reports at exit -------------------------------------------------------------------

NOTEBOOK = r'''
import sys
from pathlib import Path
import numpy as np
import diffract_spectral as diffract

work = Path(sys.argv[1])
fam = Path(diffract.generate(out=work / "fam", dtype="F32", layers=2, hidden=64, heads=4, intermediate=96,
                             vocab=100, domain_heads=1, generic_heads=1))
store = work / "s.sqlite"
ck = diffract.open(fam / "pretrained")
view = ck["model.layers.0.self_attn.q_proj.weight"]          # a view keeping the mapping alive
mem = diffract.from_arrays({"a.weight": np.random.default_rng(0).standard_normal((20, 30))}, name="mem")

@diffract.metric()                                             # registered in the engine, never removed
def top(s):
    return float(s[-1])

res = diffract.analyze([ck, mem, fam / "math"], metrics=["l2_norm", top], store=store, progress=True)
cmp = diffract.compare([fam / "math"], base=ck, reference=fam / "text", store=store)
diffract.edit.interpolate(ck, fam / "math", omega=0.5, out=work / "mid")
diffract.edit.truncate(base=mem, model={"a.weight": np.ones((20, 30))}, out=work / "t", rank=1)
top_heads = cmp.heads.sort_values("rank").head(3)
try:
    diffract.analyze(ck, metrics="nope", store=store)
except diffract.InputError as e:
    error = e                                                  # a traceback kept in a global
try:
    diffract.open(work / "missing")
except ValueError as e:
    error2 = e
def failing(s):
    raise ArithmeticError("in a custom metric")
diffract.metric(name="failing")(failing)
try:
    diffract.analyze(mem, metrics=["failing"], store=store)
except ArithmeticError as e:
    error3 = e
def score(path):                                               # an in-process sweep evaluator
    return float(view[0, 0]) + len(str(path))
sweep = diffract.sweep.interpolate(ck, fam / "math", out=work / "ip", omegas=[0, 1], eval=score, quiet=True)
try:                                                           # one that raises, its error kept in a global:
    diffract.sweep.interpolate(ck, fam / "math", out=work / "ip2", omegas=[0, 1], eval=lambda p: 1 / 0,
                               quiet=True)                     # a cycle through the bound SweepArgs
except ZeroDivisionError as e:
    error4 = e
print(len(res.metrics), len(top_heads), len(sweep.curve))
'''


def test_notebook_session_reports_no_leaks(tmp_path):
    script = tmp_path / "session.py"
    script.write_text(NOTEBOOK)
    p = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "leaked" not in p.stderr, p.stderr


# --- one version -------------------------------------------------------------------------------


def test_cli_and_package_versions_agree():
    cmake = re.search(r"project\(diffract VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert diffract.__version__ == cmake
    assert importlib.metadata.version("diffract-spectral") == cmake  # pyproject's metadata reads the same line
    p = run(["--version"])
    first, blas = p.stdout.strip().split("\n")
    assert first == f"diffract {cmake}"
    assert blas.startswith("BLAS: OpenBLAS ") and ", kernels " in blas  # the kernels in use (issue 16)


def test_version_names_the_blas_kernels_and_who_chose_them():
    # An environment that pins OpenBLAS's kernels (OPENBLAS_CORETYPE) is named: on an AVX-512 machine
    # pinned to Haswell the matrix products run at half speed (docs/performance.md).
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    detected = run(["--version"], env=env).stdout
    assert "kernels " in detected and "OPENBLAS_CORETYPE" not in detected
    pinned = run(["--version"], env={**env, "OPENBLAS_CORETYPE": "Prescott"}).stdout
    assert "kernels Prescott (set by OPENBLAS_CORETYPE=Prescott, not detected from the CPU)" in pinned
