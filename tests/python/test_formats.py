"""Checkpoint I/O against independent readers and writers: the `safetensors` package (with
ml_dtypes for bf16/f8), hand-made HF caches and sharded directories, and the bad-input contract
(exit 2, one line naming file and tensor, nothing written)."""
import json
import os
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import run, tool

RNG = np.random.default_rng(7)


def dump(path, tensor, tmp_path):
    out = tmp_path / "t.f32"
    p = subprocess.run([tool("tensor_dump"), str(path), tensor, str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return np.fromfile(out, dtype=np.float32)


def inspect_json(path, env=None):
    return json.loads(run(["inspect", path, "--json"], env=env).stdout)


ALL_DTYPES = {
    "F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": ml_dtypes.bfloat16,
    "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
    "I32": np.int32, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "I64": np.int64,
}


def test_reads_every_dtype_written_by_the_safetensors_package(tmp_path):
    tensors = {}
    for name, dt in ALL_DTYPES.items():
        a = RNG.standard_normal((6, 5)) * 3
        tensors[f"t_{name}"] = (a > 0) if dt is np.bool_ else a.astype(dt)
    f = tmp_path / "all.safetensors"
    save_file(tensors, str(f))
    info = inspect_json(f)
    assert info["format"] == "safetensors"
    got = {t["name"]: t for t in info["tensors"]}
    for name in ALL_DTYPES:
        assert got[f"t_{name}"]["dtype"] == name
        assert got[f"t_{name}"]["shape"] == [6, 5]
    for name in ["F32", "F16", "F64", "BF16", "F8_E4M3", "F8_E5M2"]:
        expected = tensors[f"t_{name}"].astype(np.float64).astype(np.float32).ravel()
        np.testing.assert_array_equal(dump(f, f"t_{name}", tmp_path), expected)  # exact decode
    # Integer tensors are listed but not analysed.
    p = subprocess.run([tool("tensor_dump"), str(f), "t_I32", str(tmp_path / "x")], capture_output=True, text=True)
    assert p.returncode == 2 and "not a floating type" in p.stderr


def test_sharded_directory_written_by_python(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    a = {"model.layers.0.self_attn.q_proj.weight": RNG.standard_normal((8, 8)).astype(np.float32)}
    b = {"model.layers.1.self_attn.q_proj.weight": RNG.standard_normal((8, 8)).astype(np.float16)}
    save_file(a, str(d / "model-00001-of-00002.safetensors"))
    save_file(b, str(d / "model-00002-of-00002.safetensors"))
    wm = {**{k: "model-00001-of-00002.safetensors" for k in a}, **{k: "model-00002-of-00002.safetensors" for k in b}}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2}))
    info = inspect_json(d)
    assert [t["name"] for t in info["tensors"]] == list(a) + list(b)
    assert info["tensors"][1]["layer"] == 1 and info["tensors"][1]["role"] == "attn_q"
    np.testing.assert_array_equal(dump(d, list(b)[0], tmp_path), b[list(b)[0]].astype(np.float32).ravel())
    # The index must agree with the shards.
    wm[list(a)[0]] = "model-00002-of-00002.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    p = run(["inspect", d], check=False)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "model.layers.0.self_attn.q_proj.weight" in p.stderr and "index" in p.stderr


def test_our_sharded_bf16_output_reads_in_python(family_bf16_sharded, tmp_path):
    d = family_bf16_sharded / "math"
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1
    seen = {}
    for s in shards:
        seen.update(load_file(str(d / s)))
    assert set(seen) == set(index["weight_map"])
    assert json.loads((d / "config.json").read_text())["num_key_value_heads"] == 4
    name = "model.layers.1.self_attn.k_proj.weight"
    assert seen[name].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(dump(d, name, tmp_path), seen[name].astype(np.float32).ravel())
    info = inspect_json(d)
    assert info["architecture"] == "Olmo2ForCausalLM"
    assert info["heads"] == {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32, "hidden_size": 256}


def test_bf16_writer_rounds_to_nearest_even(family_f32, tmp_path):
    # The generator writes f32 and bf16 from the same values: bf16 must be f32 rounded to nearest even.
    out = tmp_path / "bf"
    run(["generate", "--out", out, "--dtype", "BF16", "--layers", "2", "--hidden", "128", "--heads", "4",
         "--intermediate", "256", "--vocab", "512", "--domain-heads", "1", "--generic-heads", "1"])
    name = "model.layers.0.mlp.up_proj.weight"
    f32 = load_file(str(family_f32 / "math" / "model.safetensors"))[name]
    bf = load_file(str(out / "math" / "model.safetensors"))[name]
    np.testing.assert_array_equal(bf.astype(np.float32), f32.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_hf_cache_resolution(family_f32, tmp_path):
    home = tmp_path / "hf"
    repo = home / "hub" / "models--acme--tiny"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in (family_f32 / "math").iterdir():
        (snap / f.name).symlink_to(f)  # huggingface_hub links snapshot files to blobs
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = {**os.environ, "HF_HOME": str(home)}
    env.pop("HF_HUB_CACHE", None)
    info = inspect_json("acme/tiny", env=env)
    assert info["model"] == "acme/tiny" and len(info["tensors"]) > 10
    assert inspect_json(f"acme/tiny@{commit}", env=env)["path"].endswith(commit)
    p = run(["inspect", "acme/missing"], check=False, env=env)
    assert p.returncode == 2 and "not in the Hugging Face cache" in p.stderr
    p = run(["inspect", "acme/tiny@v9"], check=False, env=env)
    assert p.returncode == 2 and "revision 'v9'" in p.stderr


def corrupt_copy(src: Path, dst: Path, edit):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    edit(dst)
    return dst


def test_bad_inputs_exit_2_with_one_line_and_write_nothing(family_f32, tmp_path):
    src = family_f32 / "math"

    def truncate(d):
        f = d / "model.safetensors"
        f.write_bytes(f.read_bytes()[:-100])

    def lie_about_offsets(d):
        f = d / "model.safetensors"
        raw = bytearray(f.read_bytes())
        n = int.from_bytes(raw[:8], "little")
        header = raw[8:8 + n].decode()
        header = header.replace('"data_offsets":[0,', '"data_offsets":[4,', 1)
        raw[8:8 + n] = header.encode()
        f.write_bytes(bytes(raw))

    def bad_heads(d):
        cfg = json.loads((d / "config.json").read_text())
        cfg["num_attention_heads"] = cfg["num_key_value_heads"] = 3
        cfg["head_dim"] = 32
        (d / "config.json").write_text(json.dumps(cfg))

    cases = {"truncated": (truncate, "model.safetensors"), "offsets": (lie_about_offsets, "model.safetensors"),
             "heads": (bad_heads, "q_proj")}
    for name, (edit, needle) in cases.items():
        d = corrupt_copy(src, tmp_path / name, edit)
        before = {f.name: f.read_bytes() for f in d.iterdir()}
        for args in (["inspect", d], ["analyze", d, "--out", tmp_path / f"out_{name}", "--store", tmp_path / "s.sqlite"]):
            p = run(args, check=False)
            assert p.returncode == 2, (name, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and needle in lines[0] and str(d) in lines[0], (name, p.stderr)
        assert not (tmp_path / f"out_{name}").exists()
        assert {f.name: f.read_bytes() for f in d.iterdir()} == before  # inputs untouched


def test_unknown_architecture_loads_without_heads(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    save_file({"blocks.0.weird.weight": RNG.standard_normal((16, 12)).astype(np.float32)}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "mystery", "num_attention_heads": 2}))
    p = run(["inspect", d, "--json"])
    assert "heads are not split" in p.stderr
    assert json.loads(p.stdout)["heads"] is None


def test_gpt2_conv1d_heads_are_split_on_the_transposed_layout(tmp_path):
    d = tmp_path / "gpt2"
    d.mkdir()
    hidden, heads = 16, 4
    w = RNG.standard_normal((hidden, 3 * hidden)).astype(np.float32)  # Conv1D: [in, out]
    save_file({"h.0.attn.c_attn.weight": w}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": hidden, "n_head": heads}))
    out = tmp_path / "out"
    run(["analyze", d, "--out", out, "--store", tmp_path / "s.sqlite", "--metrics", "frob_norm,l2_norm", "--quiet"])
    import csv
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert len(rows) == 1 + 3 * heads
    k1 = next(r for r in rows if r["role"] == "attn_k" and r["head"] == "1")
    block = w[:, hidden + 4: hidden + 8].T  # logical (out × in) rows of key head 1
    assert (int(k1["rows"]), int(k1["cols"])) == (4, 16)
    np.testing.assert_allclose(float(k1["l2_norm"]), np.linalg.svd(block.astype(np.float64), compute_uv=False)[0], rtol=1e-10)
