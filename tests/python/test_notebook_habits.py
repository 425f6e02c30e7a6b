"""Issue 51: what a researcher in a notebook types — `diffract.eval`, `{python}` in evaluation commands,
WeightWatcher's habits (model=, a bare matrix, summary), the heads table handed to rewind, ranks that
read 1 = most important — and the hostile arguments that must be refused by name, never truncated."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import diffract_spectral as diffract
from conftest import ROOT, run

pd = pytest.importorskip("pandas")


# --- item 1: diffract.eval and {python} --------------------------------------------------------


def test_eval_is_reachable_from_the_package_and_import_stays_lazy():
    code = ("import sys, diffract_spectral as d\n"
            "assert 'diffract_spectral.eval' not in sys.modules, 'eval imported eagerly'\n"
            "assert callable(d.eval.clm_perplexity) and callable(d.eval.mlm_loss)\n"
            "assert 'eval' in dir(d)\n"
            "print(d.__file__)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    with pytest.raises(AttributeError, match="no attribute 'evaluators'"):
        diffract.evaluators  # noqa: B018


def test_the_tests_import_the_package_under_test():
    """The package imported here is the one of this checkout's build (PYTHONPATH=build/python) or the
    installed one — never another checkout's."""
    here = os.path.realpath(diffract.__file__)
    assert here.startswith(str(ROOT)) or "site-packages" in here, here


@pytest.fixture(scope="module")
def fam(tmp_path_factory):
    out = tmp_path_factory.mktemp("fam") / "f"
    diffract.generate(out=out, dtype="F32", layers=2, hidden=64, heads=4, intermediate=96, vocab=100,
                      domain_heads=1, generic_heads=1)
    return out


def test_python_placeholder_is_this_interpreter(fam, tmp_path):
    """{python} runs the interpreter running the sweep, which imports diffract_spectral (the issue: the
    `python` on PATH had not got it)."""
    cmd = ("{python} -c \"import sys, diffract_spectral; print(sys.executable); "
           "print(1.0 if len(sys.argv) > 1 else 0.0)\" {model}")
    res = diffract.sweep.interpolate(fam / "pretrained", fam / "math", out=tmp_path / "ip", omegas=[0, 1],
                                     eval=cmd, quiet=True)
    assert list(res.curve["score"]) == [1.0, 1.0]
    log = "".join(p.read_text() for p in (tmp_path / "ip" / "logs").glob("*.log"))
    assert sys.executable in log  # the command as run: {python} replaced, single-quoted
    assert res.summary.get("references") is not None


def test_cli_python_placeholder_is_diffract_python(fam, tmp_path):
    env = dict(os.environ, DIFFRACT_PYTHON=sys.executable)
    cmd = "{python} -c 'import sys; print(2.5)' {model}"
    run(["sweep", "interpolate", fam / "pretrained", fam / "math", "--omegas", "0,1", "--out", tmp_path / "ip",
         "--eval", cmd, "--quiet"], env=env)
    curve = pd.read_csv(tmp_path / "ip" / "curve.csv")
    assert list(curve["score"]) == [2.5, 2.5]
    log = "".join(p.read_text() for p in (tmp_path / "ip" / "logs").glob("*.log"))
    assert f"'{sys.executable}' -c" in log


# --- item 3: WeightWatcher's habits ------------------------------------------------------------


def test_model_keyword_is_the_first_argument(fam, tmp_path):
    store = tmp_path / "s.sqlite"
    a = diffract.analyze(fam / "math", metrics="l2_norm", store=store, heads=False)
    b = diffract.analyze(model=fam / "math", metrics="l2_norm", store=store, heads=False)
    pd.testing.assert_frame_equal(a.metrics, b.metrics)
    with pytest.raises(TypeError, match="not both"):
        diffract.analyze(fam / "math", model=fam / "math")
    c = diffract.compare(model=fam / "math", base=fam / "pretrained", store=store, heads=False)
    assert set(c.matrices["model"]) == {"math"}
    d = diffract.describe(model=fam / "math")
    assert d == diffract.inspect(fam / "math") == diffract.open(fam / "math").describe()


def test_a_bare_matrix_is_a_one_matrix_model(tmp_path):
    w = np.random.default_rng(0).standard_normal((60, 40))
    a = diffract.analyze(w, metrics="l2_norm", store=tmp_path / "s.sqlite")
    b = diffract.analyze({"weight": w}, metrics="l2_norm", store=tmp_path / "s.sqlite")
    assert len(a.metrics) == 1
    np.testing.assert_allclose(a.metrics["l2_norm"][0], np.linalg.svd(w, compute_uv=False)[0], rtol=1e-9)
    assert a.metrics["l2_norm"][0] == b.metrics["l2_norm"][0]
    two = diffract.analyze([w, 2 * w], metrics="l2_norm", store=tmp_path / "s.sqlite")
    assert len(two.metrics) == 2
    with pytest.raises(ValueError, match=r"models=.*2-D.*\(3, 4, 5\)"):
        diffract.analyze(np.zeros((3, 4, 5)))


def test_summary_is_one_row_per_model(fam, tmp_path):
    res = diffract.analyze([fam / "pretrained", fam / "math"], store=tmp_path / "s.sqlite")
    s = res.summary
    assert list(s["model"]) == ["pretrained", "math"]
    whole = res.metrics[res.metrics["head"].isna() & (res.metrics["model"] == "math")]
    row = s[s["model"] == "math"].iloc[0]
    assert row["matrices"] == len(whole)
    np.testing.assert_allclose(row["pl_alpha"], whole["pl_alpha"].mean(skipna=True), rtol=1e-12)
    np.testing.assert_allclose(row["stable_rank"], whole["stable_rank"].mean(), rtol=1e-12)
    assert list(s["component"]) == ["language", "language"]
    agg = res.aggregates.set_index("model").drop(columns="component")
    for name in agg.columns:
        np.testing.assert_allclose(row[name], agg.loc["math", name], rtol=1e-12, equal_nan=True)


# --- item 4: the heads table hands off; ranks read 1 = most important -------------------------


def test_heads_table_rank_one_is_the_most_important(fam, tmp_path):
    cmp = diffract.compare(fam / "math", base=fam / "pretrained", reference=fam / "text",
                           store=tmp_path / "s.sqlite", out=tmp_path / "cmp")
    h = cmp.heads
    assert sorted(h["rank"]) == list(range(1, len(h) + 1))
    assert h.loc[h["rank"].idxmin(), "importance"] == h["importance"].max()
    assert h.loc[h["rank"].idxmax(), "importance"] == h["importance"].min()
    # rewind_order is heads.csv's rank unchanged (0 = the first head to rewind); the CSV keeps its values
    csv = pd.read_csv(tmp_path / "cmp" / "heads.csv")
    assert list(h["rewind_order"]) == list(csv["rank"])
    assert list(h["rank"]) == [len(h) - r for r in csv["rank"]]


def test_rewind_takes_the_heads_table_or_any_subset(fam, tmp_path):
    cmp = diffract.compare(fam / "math", base=fam / "pretrained", reference=fam / "text", store=tmp_path / "s.sqlite")
    top = cmp.heads[cmp.heads.rank <= 2]  # .rank: the column on a head table (pandas' method elsewhere)
    assert top.rank.tolist() == sorted(top["rank"].tolist()) or set(top["rank"]) == {1, 2}
    assert len(top) == 2 and top.head(1).rank.iloc[0] in (1, 2)
    assert callable(cmp.matrices.rank)  # other tables keep pandas' DataFrame.rank
    expected = sorted(zip(top["layer"].astype(int), top["head"].astype(int)))
    outs = {}
    for i, heads in enumerate([top, top.to_dict("list"), list(top.itertuples()), top.to_dict("records"),
                               [(int(r.layer), int(r.head)) for r in top.itertuples()]]):
        s = diffract.edit.rewind(base=fam / "pretrained", model=fam / "math", out=tmp_path / f"r{i}", heads=heads)
        assert sorted(s["heads"]) == expected, i
        outs[i] = sorted(p.read_bytes() for p in (tmp_path / f"r{i}").glob("*.safetensors"))
    assert all(o == outs[0] for o in outs.values())
    s = diffract.edit.rewind(base=fam / "pretrained", model=fam / "math", out=tmp_path / "one",
                             heads=top.iloc[0])  # one row
    assert len(s["heads"]) == 1


def test_rewind_heads_table_of_several_models_is_refused(fam, tmp_path):
    cmp = diffract.compare([fam / "math", fam / "code"], base=fam / "pretrained", store=tmp_path / "s.sqlite")
    with pytest.raises(ValueError, match=r"heads=: the rows are of 2 models"):
        diffract.edit.rewind(base=fam / "pretrained", model=fam / "math", out=tmp_path / "r", heads=cmp.heads)
    with pytest.raises(ValueError, match=r"heads=: layer 0.5"):
        diffract.edit.rewind(base=fam / "pretrained", model=fam / "math", out=tmp_path / "r", heads=[(0.5, 1)])
    with pytest.raises(ValueError, match=r"heads=: head -1"):
        diffract.edit.rewind(base=fam / "pretrained", model=fam / "math", out=tmp_path / "r", heads=[(0, -1)])
    assert not (tmp_path / "r").exists()


# --- item 6: hostile arguments are refused by name ---------------------------------------------


@pytest.mark.parametrize("kwargs,error,needle", [
    ({"layers": [0.9]}, TypeError, r"layers=: 0.9 is not a layer index"),
    ({"layers": [-1]}, ValueError, r"layers=: -1 is not a layer index"),
    ({"layers": [True]}, TypeError, r"layers=: True"),
    ({"threads": 1.7}, TypeError, r"threads=: expected an integer, found 1.7"),
    ({"threads": 2**70}, ValueError, r"threads=: 1180591620717411303424 is out of range"),
    ({"seed": 2**70}, ValueError, r"seed=: .* out of range"),
    ({"alpha_ci": 10**6}, ValueError, r"alpha_ci=: 1000000 is out of range .*<= 10000"),
    ({"min_fit_size": -1}, ValueError, r"min_fit_size=: -1"),
    ({"roles": [1]}, TypeError, r"roles=: 1 is not a role name"),
    ({"metrics": ["pl_alpa"]}, ValueError, r"^metrics=: .*pl_alpa"),
])
def test_analyze_refuses_by_name(fam, tmp_path, kwargs, error, needle):
    with pytest.raises(error, match=needle) as e:
        diffract.analyze(fam / "math", store=tmp_path / "s.sqlite", **kwargs)
    assert "--" not in str(e.value).split(":")[0]


@pytest.mark.parametrize("kwargs,needle", [
    ({"precision": None}, r"precision=: expected a string, found None"),
    ({"heads": "yes"}, r"heads=: expected True or False, found 'yes'"),
    ({"store": 5}, r"store=: expected a path \(str or os.PathLike\) or None, found 5"),
    ({"out": b"o"}, r"out=: expected a path"),
    ({"seed": "1"}, r"seed=: expected an integer, found '1'"),
])
def test_simple_types_are_checked_by_name(fam, kwargs, needle):
    """No nanobind signature dump: a wrong type is named with its argument before the engine is called."""
    with pytest.raises(TypeError, match=needle) as e:
        diffract.analyze(fam / "math", **kwargs)
    assert "incompatible function arguments" not in str(e.value)


@pytest.mark.parametrize("call,needle", [
    (lambda f, t: diffract.compare(f / "math", base=f / "pretrained", top_k=2.5), r"top_k=: expected an integer"),
    (lambda f, t: diffract.edit.truncate(base=f / "pretrained", model=f / "math", out=t / "x", keep=float("nan")),
     r"keep=: expected a finite number"),
    (lambda f, t: diffract.edit.permute(model=f / "math", out=t / "x", device=None), r"device=: expected a string"),
    (lambda f, t: diffract.sweep.interpolate(f / "pretrained", f / "math", out=t / "x", eval="true",
                                             eval_timeout="1h"), r"eval_timeout=: expected a number"),
    (lambda f, t: diffract.watch(f, out=t / "x", poll=float("inf")), r"poll=: expected a finite number"),
    (lambda f, t: diffract.figures(t, title=3), r"title=: expected a string"),
])
def test_every_front_function_checks_types_by_name(fam, tmp_path, call, needle):
    with pytest.raises((TypeError, ValueError), match=needle):
        call(fam, tmp_path)
    assert not (tmp_path / "x").exists()


def test_cli_bounds_alpha_ci(fam, tmp_path):
    p = run(["analyze", fam / "math", "--alpha-ci", "1000000", "--out", tmp_path / "o"], check=False)
    assert p.returncode == 2 and "--alpha-ci: expected a number of draws in [0, 10000]" in p.stderr


def test_bytes_path_is_named(tmp_path):
    with pytest.raises(TypeError, match=r"models=: a path is a str or os.PathLike, not bytes"):
        diffract.analyze(b"some/path")
    with pytest.raises(TypeError, match=r"base=: a path is a str"):
        diffract.compare("x", base=b"some/path")


@pytest.mark.parametrize("kwargs,error,needle", [
    ({"hidden": 0}, ValueError, r"hidden=: 0 is out of range"),
    ({"layers": -2}, ValueError, r"layers=: -2 is out of range"),
    ({"vocab": -5}, ValueError, r"vocab=: -5"),
    ({"heads": 2.5}, TypeError, r"heads=: expected an integer"),
    ({"shard_mb": float("nan")}, ValueError, r"shard_mb=: expected a finite number, found nan"),
    ({"shard_mb": -1}, ValueError, r"shard_mb=: expected a size in MB >= 0"),
    ({"seed": 2**70}, ValueError, r"seed=: .*out of range"),
])
def test_generate_refuses_by_name(tmp_path, kwargs, error, needle):
    with pytest.raises(error, match=needle):
        diffract.generate(out=tmp_path / "g", **kwargs)
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("args,needle", [
    (["--hidden", "-4"], "--hidden: expected a number >= 1, found -4"),
    (["--layers", "0"], "--layers: expected a number >= 1, found 0"),
    (["--shard-mb", "nan"], "--shard-mb: expected a size in MB >= 0"),
])
def test_cli_generate_refuses_bad_sizes(tmp_path, args, needle):
    p = run(["generate", "--out", tmp_path / "g", *args], check=False)
    assert p.returncode == 2 and needle in p.stderr, p.stderr


def test_metric_without_a_name_is_refused():
    with pytest.raises(ValueError, match="name="):
        diffract.metric(name="")(lambda s: 1.0)
    with pytest.raises(ValueError, match="lambda"):
        diffract.metric()(lambda s: 1.0)
    assert "" not in diffract.registered_metrics() and "<lambda>" not in diffract.registered_metrics()


def test_figures_from_a_store_alone(fam, tmp_path):
    store = tmp_path / "s.sqlite"
    diffract.analyze([fam / "pretrained", fam / "math"], store=store)
    figs = diffract.figures(store=store)
    assert len(figs) > 0
    with pytest.raises(diffract.InputError, match="give result directories or result objects as arguments, or store="):
        diffract.figures()


def test_sweep_grids_and_counts_are_refused_by_name(fam, tmp_path):
    with pytest.raises(ValueError, match=r"omegas=: nan is not a finite number"):
        diffract.sweep.interpolate(fam / "pretrained", fam / "math", out=tmp_path / "o", omegas=[0, math.nan],
                                   eval="true")
    with pytest.raises(TypeError, match=r"threads=: expected an integer, found 1.5"):
        diffract.sweep.interpolate(fam / "pretrained", fam / "math", out=tmp_path / "o", omegas=[0, 1],
                                   eval="true", threads=1.5)
    with pytest.raises(TypeError, match=r"sweep.interpolate\(\) got an unexpected keyword argument 'evall'"):
        diffract.sweep.interpolate(fam / "pretrained", fam / "math", out=tmp_path / "o", evall="true")
    assert not (tmp_path / "o").exists()


def test_engine_errors_name_python_arguments(fam, tmp_path):
    with pytest.raises(diffract.InputError, match=r"^precision=: expected f32 or f64, found 'f16'"):
        diffract.analyze(fam / "math", precision="f16", store=tmp_path / "s.sqlite")
    with pytest.raises(diffract.InputError, match=r"^fraction=") as e:
        diffract.edit.rewind(base=fam / "pretrained", model=fam / "math", out=tmp_path / "r", fraction=7.0)
    assert "--" not in str(e.value)


def test_python_names_rename_only_the_functions_options():
    from diffract_spectral._keywords import python_names

    names = ["metrics", "heads", "allow_partial", "lambda_"]
    assert python_names("--metrics: unknown field 'x'", names) == "metrics=: unknown field 'x'"
    assert python_names("(use --allow-partial to skip it)", names) == "(use allow_partial= to skip it)"
    assert python_names("--no-heads and --lambda", names) == "heads=False and lambda_="
    # another program's flag, a flag with its value, an option the function does not have: as written
    text = "use `srun --mpi=pmix -n 2 diffract ...` or --ship-inputs"
    assert python_names(text, names) == text


# --- results display compactly and hand themselves to figures() / report() -------------------


def test_results_display_compactly(fam, tmp_path):
    store = tmp_path / "s.sqlite"
    res = diffract.analyze([fam / "pretrained", fam / "math"], store=store)
    cmp = diffract.compare(fam / "math", base=fam / "pretrained", reference=fam / "text", store=store)
    text = repr(res)
    assert text.startswith("<diffract.Analysis>") and len(text.splitlines()) <= 8
    assert "models: pretrained, math" in text and "computed / reused" in text
    html = cmp._repr_html_()
    assert "diffract.Comparison" in html and "base" in html and "pretrained" in html
    top = cmp.heads[cmp.heads.rank == 1].iloc[0]
    assert "rank 1 = most important" in html and f"<td>{top['layer']}</td><td>{top['head']}</td>" in html
    assert len(repr(cmp).splitlines()) <= 9
    sw = diffract.sweep.interpolate(fam / "pretrained", fam / "math", out=tmp_path / "ip", omegas=[0, 1],
                                    eval=lambda p: 1.0, quiet=True)
    assert "sweep: interpolate" in repr(sw) and "<table>" in sw._repr_html_()


def test_figures_and_report_take_result_objects(fam, tmp_path):
    store = tmp_path / "s.sqlite"
    res = diffract.analyze([fam / "pretrained", fam / "math"], store=store, out=tmp_path / "an")
    cmp = diffract.compare(fam / "math", base=fam / "pretrained", reference=fam / "text", store=store,
                           out=tmp_path / "cmp")
    from_objects = diffract.figures(res, cmp, store=store)
    from_dirs = diffract.figures(tmp_path / "an", tmp_path / "cmp", store=store)
    assert from_objects.ids() == from_dirs.ids() and len(from_objects) > 3
    assert [f.svg for f in from_objects] == [f.svg for f in from_dirs]
    assert diffract.report(res, cmp, store=store, out=tmp_path / "r.html") == [str(tmp_path / "r.html")]
    sw = diffract.sweep.interpolate(fam / "pretrained", fam / "math", out=tmp_path / "ip", omegas=[0, 0.5, 1],
                                    eval=lambda p: len(str(p)), quiet=True)
    assert "sweep-interpolate" in diffract.figures(sw).ids()
    with pytest.raises(TypeError, match="a result of analyze, compare, watch or a sweep, not int"):
        diffract.figures(3)


def test_report_draws_every_role(fam, tmp_path):
    """Issue 51 (item 5): the per-role figures have a panel for every role the results hold — not three —
    and the box plots include the matrices without a layer (embeddings, lm_head)."""
    store = tmp_path / "s.sqlite"
    res = diffract.analyze([fam / "pretrained", fam / "math"], store=store)
    figs = diffract.figures(res, store=store)
    m = res.metrics
    with_layer = set(m[m["layer"].notna() & m["stable_rank"].notna()]["role"])
    assert {"attn_k", "attn_o", "mlp_gate", "mlp_up"} <= with_layer
    for role in with_layer:
        assert f">{role}</text>" in figs["layers-stable_rank"].svg, role
        assert f">{role}</text>" in figs["boxes-stable_rank"].svg, role
    layerless = set(m[m["layer"].isna() & m["head"].isna() & m["stable_rank"].notna()]["role"])
    assert layerless  # lm_head / embed
    for role in layerless:
        assert f">{role}</text>" in figs["boxes-stable_rank"].svg, role


def test_an_alert_never_reads_two_less_than_two(fam, tmp_path):
    """An alpha just under (over) the threshold is printed with the digits that tell them apart."""
    import re
    import shutil

    run_dir = tmp_path / "run"
    for step, model in ((100, "pretrained"), (200, "math")):
        shutil.copytree(fam / model, run_dir / f"step_{step}")
    first = diffract.watch(run_dir, out=tmp_path / "w0", settle=0, min_fit_size=0, store=tmp_path / "s.sqlite")
    m = first.metrics
    alpha = float(m[m["head"].isna() & m["pl_alpha"].notna()]["pl_alpha"].iloc[0])
    rounded = float(f"{alpha:.3g}")
    assert rounded != alpha
    limits = {"alpha_high": rounded} if rounded < alpha else {"alpha_low": rounded}
    w = diffract.watch(run_dir, out=tmp_path / "w1", settle=0, min_fit_size=0, store=tmp_path / "s.sqlite",
                       **limits)
    messages = list(w.alerts["message"]) if "message" in w.alerts else []
    alpha_alerts = [x for x in messages if re.search(r"pl_alpha \S+ [<>] ", x)]
    assert alpha_alerts
    for text in alpha_alerts:
        value, limit = re.search(r"pl_alpha (\S+) [<>] (\S+):", text).groups()
        assert value != limit, text


def test_a_metric_that_runs_analyze_is_refused_by_name(tmp_path):
    w = {"w.weight": np.random.default_rng(1).standard_normal((20, 10))}

    @diffract.metric(name="recursive")
    def recursive(s):
        return float(diffract.analyze(w, metrics=["recursive"], store=tmp_path / "s.sqlite").metrics["recursive"][0])

    try:
        with pytest.raises(diffract.InputError, match="metric 'recursive': a custom metric cannot call diffract.analyze"):
            diffract.analyze(w, metrics=[recursive], store=tmp_path / "s.sqlite")
        import threading
        assert threading.active_count() < 20
    finally:
        diffract.unregister_metric(recursive)


def test_nan_in_an_in_memory_config_is_named(tmp_path):
    w = {"model.layers.0.self_attn.q_proj.weight": np.zeros((8, 8), dtype=np.float32)}
    with pytest.raises(diffract.InputError, match=r"config=: 'num_attention_heads' is NaN or infinite"):
        diffract.from_arrays(w, config={"num_attention_heads": float("nan"), "hidden_size": 8})


def test_ctrl_c_stops_a_long_bootstrap_within_its_matrix(tmp_path):
    """alpha_ci draws check for Ctrl-C: one large matrix's bootstrap no longer runs to its end first."""
    import signal
    import threading
    import time

    rng = np.random.default_rng(0)
    n = 1500
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    w = {"a.weight": (u * (rng.pareto(1.5, n) + 1.0)) @ v.T}  # a heavy-tailed spectrum: every draw fits
    kwargs = dict(metrics="pl_alpha,pl_alpha_ci_low", alpha_ci=10000, min_fit_size=10, threads=1)
    t0 = time.perf_counter()
    diffract.analyze(w, store=tmp_path / "full.sqlite", **kwargs)
    full = time.perf_counter() - t0
    timer = threading.Timer(0.25 * full, lambda: os.kill(os.getpid(), signal.SIGINT))
    t0 = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        diffract.analyze(w, store=tmp_path / "cut.sqlite", **kwargs)
    assert time.perf_counter() - t0 < 0.7 * full, (time.perf_counter() - t0, full)
