"""The Python bindings (`import diffract_spectral as diffract`) against numpy, safetensors and the CLI.

The module must be importable: scripts/test.sh runs `pip install .` before the suite.
"""
import gc
import inspect
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import load_file

import diffract_spectral as diffract
from conftest import ROOT, binary, run

SPECTRAL = "frob_norm,l2_norm,nuclear_norm,stable_rank,max_weights_sval,min_weights_sval,esd_max,hard_rank"


def svals(w):
    """Singular values, ascending, in float64 (numpy's gesdd)."""
    return np.sort(np.linalg.svd(np.asarray(w, dtype=np.float64), compute_uv=False))


def numpy_spectral(w):
    """The SPECTRAL fields from numpy, as in reference/metrics.md."""
    s = svals(w)
    esd = s**2 / max(w.shape)
    return {"frob_norm": np.sqrt((s**2).sum()), "l2_norm": s[-1], "nuclear_norm": s.sum(),
            "stable_rank": (np.sqrt((s**2).sum()) / (s[-1] + 1e-16)) ** 2, "max_weights_sval": s[-1],
            "min_weights_sval": s[0], "esd_max": esd[-1], "hard_rank": float((esd > 1e-5 * esd[-1]).sum())}


def safetensors_file(model_dir):
    return Path(model_dir) / "model.safetensors"


# --- opening and iterating ---------------------------------------------------------------------


def test_open_iterates_zero_copy_views(family_f32):
    path = family_f32 / "pretrained"
    ck = diffract.open(path)
    expected = load_file(str(safetensors_file(path)))
    assert ck.name == "pretrained" and ck.format == "safetensors"
    assert list(ck) == list(ck.keys()) and set(ck) == set(expected) and len(ck) == len(expected)
    raw = np.memmap(safetensors_file(path), dtype=np.uint8, mode="r")
    for name, arr in ck.items():
        np.testing.assert_array_equal(arr, expected[name])
        assert arr.dtype == expected[name].dtype and arr.shape == expected[name].shape
        assert not arr.flags.writeable
        # Zero-copy: two reads share memory, and the bytes sit at the tensor's offset in the file.
        assert np.shares_memory(arr, ck[name])
        assert arr.base is not None
        info = ck.info(name)
        assert info["dtype"] == "F32" and tuple(info["shape"]) == arr.shape and info["nbytes"] == arr.nbytes
        assert bytes(raw[info["offset"]:info["offset"] + info["nbytes"]]) == arr.tobytes()
    assert ck.config["num_attention_heads"] == 4


def test_views_keep_the_mapping_alive(family_f32):
    ck = diffract.open(family_f32 / "math")
    name = ck.keys()[0]
    arr = ck[name]
    copy = np.array(arr)
    del ck
    gc.collect()
    np.testing.assert_array_equal(arr, copy)


def test_open_named_and_errors_like_cli(family_f32, tmp_path):
    assert diffract.open(family_f32 / "code", name="c").name == "c"
    assert diffract.open(f"x={family_f32 / 'code'}").name == "x"
    # A truncated file: the exception carries the CLI's message, naming the file.
    bad = tmp_path / "trunc.safetensors"
    data = safetensors_file(family_f32 / "pretrained").read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    p = run(["inspect", bad], check=False)
    assert p.returncode == 2
    cli_message = p.stderr.strip().removeprefix("diffract: error: ")
    with pytest.raises(diffract.InputError) as e:
        diffract.open(bad)
    assert isinstance(e.value, ValueError)
    assert str(e.value) == cli_message and str(bad) in str(e.value)
    with pytest.raises(diffract.InputError) as e:
        diffract.analyze(bad, store=tmp_path / "s.sqlite")
    assert str(e.value) == cli_message
    with pytest.raises(diffract.InputError, match="no such file or directory"):
        diffract.open(tmp_path / "missing")


@pytest.mark.parametrize("kwargs, flag", [({"precision": "f16"}, "--precision"), ({"svd_route": "qr"}, "--svd-route"),
                                          ({"metrics": "nope"}, "--metrics"), ({"layers": "x"}, "--layers"),
                                          ({"max_memory": "lots"}, "--max-memory")])
def test_option_errors_match_cli(family_f32, tmp_path, kwargs, flag):
    """The CLI's message, its options named as the Python arguments (issue 51: --metrics → metrics=)."""
    from diffract_spectral._keywords import python_names

    (key, value), = kwargs.items()
    cli = run(["analyze", family_f32 / "math", "--out", tmp_path / "o", "--store", tmp_path / "s.sqlite", "--quiet",
               "--" + key.replace("_", "-"), value], check=False)
    assert cli.returncode == 2
    message = cli.stderr.strip().removeprefix("diffract: error: ")
    assert message.startswith(flag)
    with pytest.raises(diffract.InputError) as e:
        diffract.analyze(family_f32 / "math", store=tmp_path / "s.sqlite", **kwargs)
    assert str(e.value) == python_names(message) and str(e.value).startswith(key + "=:")


def test_bf16_views_and_decoded_fallback(family_bf16_sharded, monkeypatch):
    ck = diffract.open(family_bf16_sharded / "pretrained")
    name = next(n for n in ck if ck.info(n)["dtype"] == "BF16" and len(ck.info(n)["shape"]) == 2)
    info = ck.info(name)
    arr = ck[name]
    assert arr.dtype == ml_dtypes.bfloat16 and np.shares_memory(arr, ck[name])
    shard = Path(info["path"])
    bits = np.memmap(shard, dtype=np.uint8, mode="r")[info["offset"]:info["offset"] + info["nbytes"]]
    expected = np.frombuffer(bits.tobytes(), dtype=ml_dtypes.bfloat16).reshape(info["shape"])
    np.testing.assert_array_equal(arr, expected)
    decoded = ck.tensor(name, decode=True)
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, expected.astype(np.float32))
    monkeypatch.setattr(diffract, "_ml_dtypes", None)  # without ml_dtypes: float32 copies
    fallback = ck[name]
    assert fallback.dtype == np.float32 and not np.shares_memory(fallback, arr)
    np.testing.assert_array_equal(fallback, decoded)


def test_gguf_f32_f16_views_and_q8_decoded(tmp_path):
    gguf = pytest.importorskip("gguf")
    QT = gguf.GGMLQuantizationType
    rng = np.random.default_rng(3)
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.attention.head_count", 4)
    f32 = rng.standard_normal((16, 64)).astype(np.float32)
    f16 = rng.standard_normal((64, 64)).astype(np.float16)
    q_src = rng.standard_normal((32, 64)).astype(np.float32)
    packed = gguf.quants.quantize(q_src, QT.Q8_0)
    w.add_tensor("token_embd.weight", f32)
    w.add_tensor("blk.0.ffn_up.weight", f16)  # not Q/K: those are read in HF row order (test_gguf_rope.py)
    w.add_tensor("blk.0.ffn_down.weight", packed, raw_dtype=QT.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ck = diffract.open(path)
    assert ck.format == "gguf"
    np.testing.assert_array_equal(ck["token_embd.weight"], f32)
    np.testing.assert_array_equal(ck["blk.0.ffn_up.weight"], f16)
    assert np.shares_memory(ck["blk.0.ffn_up.weight"], ck["blk.0.ffn_up.weight"])
    q = ck["blk.0.ffn_down.weight"]
    assert q.dtype == np.float32 and q.shape == (32, 64)
    np.testing.assert_allclose(q, gguf.quants.dequantize(packed, QT.Q8_0).reshape(32, 64), rtol=0, atol=1e-6)


# --- analyze -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_analysis(family_f32, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli_an")
    run(["analyze", family_f32 / "pretrained", family_f32 / "math", "--out", out / "csv", "--store",
         out / "s.sqlite", "--quiet", "--metrics", "default"])
    return out / "csv"


def test_analyze_dataframe_equals_cli_csv(family_f32, cli_analysis, tmp_path):
    res = diffract.analyze([family_f32 / "pretrained", diffract.open(family_f32 / "math")],
                           metrics="default", store=tmp_path / "s.sqlite", out=tmp_path / "csv")
    assert isinstance(res.metrics, pd.DataFrame) and res.computed > 0 and res.reused == 0
    pd.testing.assert_frame_equal(res.metrics, pd.read_csv(cli_analysis / "metrics.csv"), check_dtype=False)
    pd.testing.assert_frame_equal(res.aggregates, pd.read_csv(cli_analysis / "aggregates.csv"), check_dtype=False)
    # out= writes the CLI's files, byte for byte.
    for f in ["metrics.csv", "aggregates.csv"]:
        assert (tmp_path / "csv" / f).read_bytes() == (cli_analysis / f).read_bytes()
    again = diffract.analyze([family_f32 / "pretrained", family_f32 / "math"], metrics="default",
                             store=tmp_path / "s.sqlite")
    assert again.computed == 0 and again.reused == res.computed


def test_analyze_selection_options(family_f32, tmp_path):
    res = diffract.analyze(family_f32 / "math", metrics="frob_norm", heads=False, roles=["attn_q", "mlp_down"],
                           layers=[1], exclude="down", store=tmp_path / "s.sqlite", threads=1, precision="f32")
    df = res.metrics
    assert list(df.columns) == ["model", "tensor", "component", "layer", "role", "expert", "expert_kind", "head",
                                "rows", "cols", "nonfinite_count", "precision", "frob_norm"]
    assert list(df["role"]) == ["attn_q"] and list(df["layer"]) == [1] and df["head"].isna().all()
    assert list(df["precision"]) == ["f64"]  # a square matrix: the f32 Gram route does not serve it
    w = load_file(str(safetensors_file(family_f32 / "math")))[df["tensor"][0]]
    np.testing.assert_allclose(df["frob_norm"][0], np.linalg.norm(w.astype(np.float64)), rtol=1e-5)


def test_dicts_of_lists_without_pandas(family_f32, tmp_path, monkeypatch):
    monkeypatch.setattr(diffract, "_pandas", lambda: None)
    res = diffract.analyze(family_f32 / "math", metrics="l2_norm", heads=False, store=tmp_path / "s.sqlite")
    assert isinstance(res.metrics, dict) and isinstance(res.metrics["l2_norm"], list)
    assert set(res.metrics) == {"model", "tensor", "component", "layer", "role", "expert", "expert_kind", "head",
                                "rows", "cols", "nonfinite_count", "precision", "l2_norm"}
    assert len({len(v) for v in res.metrics.values()}) == 1
    assert isinstance(res.aggregates, dict) and res.aggregates["model"] == ["math"]
    cmp = diffract.compare([family_f32 / "math"], base=family_f32 / "pretrained", heads=False,
                           store=tmp_path / "s.sqlite")
    assert isinstance(cmp.matrices, dict) and isinstance(cmp.heads, dict) and isinstance(cmp.skipped, dict)
    assert isinstance(diffract.catalog(), dict)


def test_in_memory_arrays_match_numpy(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "a.weight": rng.standard_normal((64, 48)).astype(np.float32),
        "b.weight": rng.standard_normal((30, 70)),  # float64
        "c.weight": rng.standard_normal((40, 40)).astype(ml_dtypes.bfloat16),
        "d.weight": rng.standard_normal((20, 24)).astype(np.float16),
        "e.weight": np.asfortranarray(rng.standard_normal((16, 32)).astype(np.float32)),  # copied to C order
        "steps": np.arange(5, dtype=np.int64),  # not analysed
    }
    ck = diffract.from_arrays(arrays, name="mem")
    assert ck.path == "memory:mem" and ck.keys() == list(arrays)
    assert np.shares_memory(ck["a.weight"], arrays["a.weight"])  # zero-copy both ways
    assert ck["c.weight"].dtype == ml_dtypes.bfloat16 and np.shares_memory(ck["c.weight"], arrays["c.weight"])
    np.testing.assert_array_equal(ck["steps"], arrays["steps"])
    res = diffract.analyze(arrays, metrics=SPECTRAL, store=tmp_path / "s.sqlite")
    df = res.metrics.set_index("tensor")
    assert sorted(df.index) == ["a.weight", "b.weight", "c.weight", "d.weight", "e.weight"]
    assert set(df["model"]) == {"memory"}
    for name, row in df.iterrows():
        for field, value in numpy_spectral(arrays[name].astype(np.float64)).items():
            np.testing.assert_allclose(row[field], value, rtol=1e-9, err_msg=f"{name} {field}")
    # The same checkpoint object again: reused from the store (same content fingerprint).
    assert diffract.analyze(ck, metrics=SPECTRAL, store=tmp_path / "s.sqlite").reused == 5
    with pytest.raises(diffract.InputError, match="unsupported array dtype"):
        diffract.from_arrays({"x": np.zeros(3, dtype=np.complex64)})


class FakeTorchTensor:
    """Duck-typed like torch.Tensor (the conversion never imports torch for float32 tensors)."""
    __module__ = "torch"

    def __init__(self, array):
        self.array = array
        self.dtype = "torch.float32"
        self.device = type("Device", (), {"type": "cpu"})()

    def detach(self):
        return self

    def contiguous(self):
        return self

    def element_size(self):
        return self.array.itemsize

    def numpy(self):
        return self.array


def test_state_dict_like_tensors_via_numpy(tmp_path):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((24, 36)).astype(np.float32)
    ck = diffract.from_arrays({"layer.weight": FakeTorchTensor(w)})
    assert np.shares_memory(ck["layer.weight"], w)
    res = diffract.analyze(ck, metrics="l2_norm", store=tmp_path / "s.sqlite")
    np.testing.assert_allclose(res.metrics["l2_norm"][0], svals(w)[-1], rtol=1e-9)


def test_in_memory_model_with_config_has_head_rows(family_f32, tmp_path):
    path = family_f32 / "pretrained"
    arrays = load_file(str(safetensors_file(path)))
    mem = diffract.analyze(diffract.from_arrays(arrays, name="pretrained", config=path / "config.json"),
                           metrics=SPECTRAL, store=tmp_path / "a.sqlite").metrics
    disk = diffract.analyze(path, metrics=SPECTRAL, store=tmp_path / "b.sqlite").metrics
    assert mem["head"].notna().any()
    pd.testing.assert_frame_equal(mem, disk)


# --- compare -----------------------------------------------------------------------------------


def test_compare_equals_cli_csv(family_f32, tmp_path):
    f = family_f32
    run(["compare", "--base", f / "pretrained", f / "math", f / "code", "--reference", f / "text", "--out",
         tmp_path / "cli", "--store", tmp_path / "cli.sqlite", "--quiet", "--top-k", "5", "--order", "agreement"])
    res = diffract.compare([f / "math", f / "code"], base=diffract.open(f / "pretrained"), reference=f / "text",
                           top_k=5, order="agreement", store=tmp_path / "py.sqlite", out=tmp_path / "py")
    pd.testing.assert_frame_equal(res.matrices, pd.read_csv(tmp_path / "cli" / "compare.csv"), check_dtype=False)
    heads_csv = pd.read_csv(tmp_path / "cli" / "heads.csv")
    # Python presents rank as 1 = the most important head and keeps heads.csv's rank as rewind_order.
    pd.testing.assert_frame_equal(res.heads.drop(columns=["rank"]).rename(columns={"rewind_order": "rank"}),
                                  heads_csv, check_dtype=False)
    n = heads_csv.groupby("model")["rank"].transform("size")
    assert list(res.heads["rank"]) == list(n - heads_csv["rank"])
    assert len(res.skipped) == 0 and res.computed > 0
    for name in ["compare.csv", "heads.csv"]:
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    # Against numpy: the delta's Frobenius norm of one whole matrix.
    row = res.matrices[(res.matrices["model"] == "math") & res.matrices["head"].isna()].iloc[0]
    a = load_file(str(safetensors_file(f / "math")))[row["tensor"]].astype(np.float64)
    b = load_file(str(safetensors_file(f / "pretrained")))[row["tensor"]].astype(np.float64)
    np.testing.assert_allclose(row["delta_frob_norm"], np.linalg.norm(a - b), rtol=1e-9)
    with pytest.raises(diffract.InputError, match="scale_scope="):
        diffract.compare([f / "math"], base=f / "pretrained", scale_scope="nope", store=tmp_path / "py.sqlite")


def test_compare_takes_in_memory_models(family_f32, tmp_path):
    base = load_file(str(safetensors_file(family_f32 / "pretrained")))
    name = "model.layers.0.mlp.up_proj.weight"
    moved = {name: (base[name] + 0.5).astype(np.float32)}
    res = diffract.compare([diffract.from_arrays(moved, name="m")],
                           base=diffract.from_arrays({name: base[name]}, name="b"), store=tmp_path / "s.sqlite")
    row = res.matrices[res.matrices["tensor"] == name].iloc[0]
    expected = np.linalg.norm(moved[name].astype(np.float64) - base[name].astype(np.float64))
    np.testing.assert_allclose(row["delta_frob_norm"], expected, rtol=1e-9)
    # A shape mismatch between in-memory models names the tensor.
    with pytest.raises(diffract.InputError, match=name):
        diffract.compare([diffract.from_arrays({name: np.ones((4, 4), np.float32)}, name="m")],
                         base=diffract.from_arrays({name: base[name]}, name="b"), store=tmp_path / "s.sqlite")


# --- custom metrics ----------------------------------------------------------------------------


def test_custom_metric_is_a_column_and_stored(family_f32, tmp_path):
    calls = []

    # version= fixed: the default version hashes the closure, and `calls` grows with every call
    @diffract.metric(needs=["weights_svals"], version="1")
    def top3_energy(s):
        """Share of the spectrum's energy in the 3 largest singular values."""
        calls.append(1)
        return float((s[-3:] ** 2).sum() / (s**2).sum())

    @diffract.metric(needs=["esd", "weights"], name="esd_check")
    def esd_check(esd, w):
        """max(esd) minus the largest eigenvalue of W^T W / N from numpy (≈ 0)."""
        return float(esd[-1] - svals(w)[-1] ** 2 / max(w.shape))

    try:
        store = tmp_path / "s.sqlite"
        path = family_f32 / "math"
        res = diffract.analyze(path, metrics=["frob_norm", top3_energy, "esd_check"], store=store)
        df = res.metrics
        assert list(df.columns)[-3:] == ["frob_norm", "top3_energy", "esd_check"]
        assert res.fields == ["frob_norm", "top3_energy", "esd_check"]
        n = len(df)
        assert len(calls) == n
        weights = load_file(str(safetensors_file(path)))
        for _, row in df[df["head"].isna()].iterrows():
            s = svals(weights[row["tensor"]])
            np.testing.assert_allclose(row["top3_energy"], (s[-3:] ** 2).sum() / (s**2).sum(), rtol=1e-9)
        assert np.abs(df["esd_check"]).max() < 1e-9 * df["frob_norm"].max() ** 2
        db = sqlite3.connect(store)
        assert db.execute("SELECT COUNT(*) FROM results WHERE field='top3_energy'").fetchone()[0] == n
        db.close()
        again = diffract.analyze(path, metrics=["frob_norm", top3_energy, "esd_check"], store=store)
        assert again.computed == 0 and len(calls) == n  # read back, not recomputed
        pd.testing.assert_frame_equal(again.metrics, df)
        assert "top3_energy" in diffract.registered_metrics()
        assert diffract.resolve_metrics("l2_norm,top3_energy") == ["l2_norm", "top3_energy"]
    finally:
        diffract.unregister_metric(top3_energy)
        diffract.unregister_metric("esd_check")
    assert "top3_energy" not in diffract.registered_metrics()
    with pytest.raises(diffract.InputError, match="unknown field 'top3_energy'"):
        diffract.analyze(family_f32 / "math", metrics="top3_energy", store=tmp_path / "s.sqlite")


def test_custom_metric_runs_in_the_job(family_f32, tmp_path):
    """Custom fields are job slots: computed on the job's worker threads (not after the job on the
    caller's), reusing stored built-in fields, and a new version recomputes only the custom field."""
    threads = set()
    calls = []

    def make(version):
        @diffract.metric(needs=["weights_svals", "weights"], name="spread_check", version=version)
        def spread_check(s, w):
            """Largest singular value from the engine minus numpy's (≈ 0)."""
            threads.add(threading.get_ident())
            calls.append(version)
            return float(s[-1] - svals(w)[-1])
        return spread_check

    store = tmp_path / "s.sqlite"
    path = family_f32 / "math"
    try:
        plain = diffract.analyze(path, metrics="frob_norm", heads=False, store=store)
        n = len(plain.metrics)
        make("1")
        first = diffract.analyze(path, metrics="frob_norm,spread_check", heads=False, store=store, threads=2)
        # The built-in fields were reused; every unit computed its custom field once, on worker threads.
        assert first.computed == n and first.reused == 0 and len(calls) == n
        assert threading.get_ident() not in threads
        assert np.abs(first.metrics["spread_check"]).max() < 1e-9 * first.metrics["frob_norm"].max()
        pd.testing.assert_series_equal(first.metrics["frob_norm"], plain.metrics["frob_norm"])
        db = sqlite3.connect(store)
        built_in = db.execute("SELECT COUNT(*) FROM results WHERE field='frob_norm'").fetchone()[0]
        again = diffract.analyze(path, metrics="frob_norm,spread_check", heads=False, store=store)
        assert again.computed == 0 and again.reused == n and len(calls) == n
        make("2")  # a new version: only the custom field is computed again, under its own key
        second = diffract.analyze(path, metrics="frob_norm,spread_check", heads=False, store=store)
        assert second.computed == n and calls.count("2") == n
        assert db.execute("SELECT COUNT(*) FROM results WHERE field='frob_norm'").fetchone()[0] == built_in
        assert db.execute("SELECT COUNT(*) FROM results WHERE field='spread_check'").fetchone()[0] == 2 * n
        db.close()
    finally:
        diffract.unregister_metric("spread_check")


def test_custom_metric_errors(family_f32, tmp_path):
    with pytest.raises(diffract.InputError, match="built-in field"):
        diffract.metric(name="l2_norm")(lambda s: 0.0)
    with pytest.raises(diffract.InputError, match="unknown input 'gradients'"):
        diffract.metric(needs=["gradients"], name="g")(lambda g: 0.0)
    with pytest.raises(diffract.InputError, match="a lambda has no name: give name="):
        diffract.metric()(lambda s: 0.0)  # it would register as "<lambda>"

    @diffract.metric(needs=["weights_svals"])
    def broken(s):
        """Raises: the exception reaches the caller of analyze."""
        raise ZeroDivisionError("custom metric failed")

    try:
        with pytest.raises(ZeroDivisionError, match="custom metric failed"):
            diffract.analyze(family_f32 / "math", metrics=[broken], store=tmp_path / "s.sqlite")
    finally:
        diffract.unregister_metric(broken)


# --- the GIL and Ctrl-C ------------------------------------------------------------------------


def test_gil_released_during_analyze(tmp_path):
    rng = np.random.default_rng(2)
    arrays = {f"m{i}.weight": rng.standard_normal((384, 384)) for i in range(6)}
    done = threading.Event()
    result = {}

    def work():
        result["r"] = diffract.analyze(arrays, metrics="all", store=tmp_path / "s.sqlite", threads=1)
        done.set()

    t = threading.Thread(target=work)
    t0 = time.perf_counter()
    t.start()
    counter = 0
    while not done.is_set():
        counter += 1
    t.join()
    elapsed = time.perf_counter() - t0
    assert result["r"].computed == 6
    # With the GIL held for the whole analysis the loop could only spin between Python bytecodes of the
    # worker (a handful of iterations); released, it spins all along.
    assert elapsed > 0.05 and counter > 10000, (elapsed, counter)


def test_ctrl_c_interrupts_cleanly(family_f32, tmp_path):
    calls = []
    sent = []

    @diffract.metric(needs=["weights_svals"], version="1")  # fixed: `calls` in its closure grows
    def slow(s):
        """A slow metric that presses Ctrl-C itself once three matrices are done (no timing race)."""
        calls.append(1)
        time.sleep(0.05)
        if len(calls) == 3 and not sent:
            sent.append(time.perf_counter())
            os.kill(os.getpid(), signal.SIGINT)
        return float(s[-1])

    store = tmp_path / "s.sqlite"
    try:
        with pytest.raises(KeyboardInterrupt):
            diffract.analyze(family_f32 / "math", metrics=["l2_norm", slow], store=store, threads=1)
        assert sent and time.perf_counter() - sent[0] < 3.0
        first = len(calls)
        # Matrices finished before the interrupt are in the store; the next run completes the rest.
        res = diffract.analyze(family_f32 / "math", metrics=["l2_norm", slow], store=store, threads=2)
        assert 3 <= first < len(res.metrics) and len(calls) == len(res.metrics)
        assert res.metrics["slow"].notna().all()
    finally:
        diffract.unregister_metric(slow)


# --- edits ------------------------------------------------------------------------------------


def edited(out):
    """The edited directory's tensors (float64)."""
    files = sorted(Path(out).glob("*.safetensors"))
    return {k: v.astype(np.float64) for f in files for k, v in load_file(str(f)).items()}


def test_edits_against_numpy(family_f32, tmp_path):
    rng = np.random.default_rng(5)
    base = {"a.weight": rng.standard_normal((24, 16)), "b.weight": rng.standard_normal((12, 20))}
    model = {k: v + 0.3 * rng.standard_normal(v.shape) for k, v in base.items()}

    diffract.edit.truncate(base=base, model=model, out=tmp_path / "t", rank=2)
    for k, w in edited(tmp_path / "t").items():
        u, s, vt = np.linalg.svd(model[k] - base[k], full_matrices=False)
        np.testing.assert_allclose(w, base[k] + (u[:, :2] * s[:2]) @ vt[:2], atol=1e-10)

    diffract.edit.transplant(base=base, model=model, out=tmp_path / "x")
    for k, w in edited(tmp_path / "x").items():
        np.testing.assert_allclose(svals(w), svals(base[k]), rtol=1e-9)

    diffract.edit.permute(model=model, out=tmp_path / "p", seed=3)
    for k, w in edited(tmp_path / "p").items():
        np.testing.assert_allclose(svals(w), svals(model[k]), rtol=1e-9)

    diffract.edit.interpolate(base, model, omega=0.25, out=tmp_path / "i")
    for k, w in edited(tmp_path / "i").items():
        np.testing.assert_allclose(w, 0.75 * base[k] + 0.25 * model[k], atol=1e-12)

    s = diffract.edit.merge(base=base, models=[model, model], out=tmp_path / "m", weights=[0.5, 0.5])
    assert s == {"edited": 2, "copied": 0, "changed": 2, "only_in_primary": [], "only_in_other": []}
    for k, w in edited(tmp_path / "m").items():
        np.testing.assert_allclose(w, model[k], atol=1e-12)

    with pytest.raises(diffract.InputError, match="give exactly one of keep=, rank= and energy="):
        diffract.edit.truncate(base=base, model=model, out=tmp_path / "t2")


def test_rewind_heads_and_fraction(family_f32, tmp_path):
    f = family_f32
    s = diffract.edit.rewind(base=f / "pretrained", model=diffract.open(f / "math"), out=tmp_path / "r", heads=[(1, 2)])
    assert s["heads"] == [(1, 2)] and s["edited"] > 0
    out, pre = edited(tmp_path / "r"), load_file(str(safetensors_file(f / "pretrained")))
    q = "model.layers.1.self_attn.q_proj.weight"
    np.testing.assert_array_equal(out[q][64:96], pre[q][64:96])  # head 2 of 4, head_dim 32
    cli = run(["edit", "rewind", "--base", f / "pretrained", "--model", f / "math", "--reference", f / "text",
               "--fraction", "0.25", "--out", tmp_path / "cli", "--store", tmp_path / "s.sqlite", "--quiet"])
    assert cli.returncode == 0
    py = diffract.edit.rewind(base=f / "pretrained", model=f / "math", out=tmp_path / "py", reference=f / "text",
                              fraction=0.25, store=tmp_path / "s.sqlite")
    assert len(py["heads"]) == 2
    for name in ["rewound_heads.csv", *sorted(p.name for p in (tmp_path / "cli").glob("*.safetensors"))]:
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    with pytest.raises(diffract.InputError, match="give exactly one of fraction= and heads="):
        diffract.edit.rewind(base=f / "pretrained", model=f / "math", out=tmp_path / "r2")
    # A heads list follows the heads file's rules: at least one head, none twice.
    with pytest.raises(diffract.InputError, match="lists no heads"):
        diffract.edit.rewind(base=f / "pretrained", model=f / "math", out=tmp_path / "r3", heads=[])
    with pytest.raises(diffract.InputError, match="listed twice"):
        diffract.edit.rewind(base=f / "pretrained", model=f / "math", out=tmp_path / "r4", heads=[(0, 1), (0, 1)])
    assert not (tmp_path / "r3").exists() and not (tmp_path / "r4").exists()
    # merge's models is a list: one string would have been read as its characters.
    with pytest.raises(TypeError, match="list of models"):
        diffract.edit.merge(base=f / "pretrained", models=f"{f / 'math'},{f / 'code'}", out=tmp_path / "m")


def test_rewind_by_fraction_ranks_in_memory_models(family_f32, tmp_path):
    # The head ranking is a compare job on the opened checkpoints: in-memory models rank (and rewind)
    # exactly as their files do (this was refused while compare took spec strings).
    f = family_f32
    config = f / "pretrained" / "config.json"
    mem = {m: diffract.from_arrays(load_file(str(safetensors_file(f / m))), name=m, config=config)
           for m in ["pretrained", "math", "text"]}
    py = diffract.edit.rewind(base=mem["pretrained"], model=mem["math"], reference=mem["text"], fraction=0.25,
                              out=tmp_path / "mem", store=tmp_path / "m.sqlite")
    files = diffract.edit.rewind(base=f / "pretrained", model=f / "math", reference=f / "text", fraction=0.25,
                                 out=tmp_path / "files", store=tmp_path / "f.sqlite")
    assert py["heads"] == files["heads"] and len(py["heads"]) == 2
    a, b = edited(tmp_path / "mem"), edited(tmp_path / "files")
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# --- generate, docs, example -------------------------------------------------------------------


def test_generate_equals_cli(tmp_path):
    args = {"layers": 1, "hidden": 64, "heads": 4, "intermediate": 96, "vocab": 100, "domain_heads": 1,
            "generic_heads": 1}
    diffract.generate(out=tmp_path / "py", dtype="F32", **args)
    run(["generate", "--out", tmp_path / "cli", "--dtype", "F32", *[x for k, v in args.items() for x in ("--" + k.replace("_", "-"), v)]])
    for f in sorted((tmp_path / "cli").rglob("*")):
        if f.is_file():
            assert (tmp_path / "py" / f.relative_to(tmp_path / "cli")).read_bytes() == f.read_bytes(), f
    with pytest.raises(diffract.InputError, match="dtype=: expected BF16, F16 or F32"):
        diffract.generate(out=tmp_path / "bad", dtype="F64")


def public_api():
    for name in diffract.edit.__all__:
        yield f"edit.{name}", getattr(diffract.edit, name)
    for name in diffract.__all__:
        obj = getattr(diffract, name)
        yield name, obj
        if inspect.isclass(obj) and obj.__module__ == "diffract_spectral":
            for attr, member in vars(obj).items():
                if not attr.startswith("_") or attr in ("__init__", "__getitem__", "__iter__", "__len__"):
                    if callable(member) or isinstance(member, property):
                        yield f"{name}.{attr}", member


def test_every_public_function_has_a_docstring():
    missing = [name for name, obj in public_api() if not (inspect.getdoc(obj) or "").strip()]
    assert not missing, missing
    assert (ROOT / "docs" / "python.md").exists()


def test_notebook_example_runs(tmp_path):
    env = dict(os.environ, DIFFRACT_BIN=binary())
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "notebook_walkthrough.py"), str(tmp_path)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "most changed heads" in p.stdout
