"""GGUF interop: files written by the `gguf` package (llama.cpp's gguf-py) read back by diffract.

Drives the `gguf_dump` test tool (tests/tools/gguf_dump.cpp), found in $DIFFRACT_TOOLS_DIR or, failing
that, build/tests.
"""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402

from conftest import tool  # noqa: E402


@pytest.fixture(scope="module")
def gguf_dump():
    exe = Path(tool("gguf_dump"))
    # A missing tool fails, never skips: the default build makes it.
    assert exe.exists(), f"gguf_dump not built ({exe}): cmake --build build, or set DIFFRACT_TOOLS_DIR"
    return exe


def run(exe, *args):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120)


def dump(exe, path):
    r = run(exe, path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def extract(exe, path, name, tmp_path):
    out = tmp_path / f"{name}.f32"
    r = run(exe, path, name, out)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype="<f4")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny llama-style GGUF v3 file; returns (path, {name: (ggml type, source array, stored array)})."""
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny")
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.attention.head_count", 8)
    w.add_uint32("llama.attention.head_count_kv", 2)
    w.add_uint64("llama.context_length", 4096)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_bool("general.test_flag", True)
    w.add_array("general.tags", ["a", "b", "c"])
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(300)])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(300)])

    tensors = {}
    emb = rng.standard_normal((16, 64)).astype(np.float32)
    tensors["token_embd.weight"] = ("F32", emb, emb)
    w.add_tensor("token_embd.weight", emb)

    norm = rng.standard_normal(64).astype(np.float32)
    tensors["blk.0.attn_norm.weight"] = ("F32", norm, norm)
    w.add_tensor("blk.0.attn_norm.weight", norm)

    q16 = rng.standard_normal((64, 64)).astype(np.float16)
    tensors["blk.0.attn_q.weight"] = ("F16", q16, q16)
    w.add_tensor("blk.0.attn_q.weight", q16)

    for name, shape in [("blk.0.attn_k.weight", (16, 64)), ("blk.0.ffn_up.weight", (96, 64))]:
        src = rng.standard_normal(shape).astype(np.float32)
        packed = gguf.quants.quantize(src, QT.Q8_0)
        assert packed.dtype == np.uint8 and packed.shape == (shape[0], shape[1] // 32 * 34)
        tensors[name] = ("Q8_0", src, packed)
        w.add_tensor(name, packed, raw_dtype=QT.Q8_0)

    src = rng.standard_normal((32, 64)).astype(np.float32)
    packed = gguf.quants.quantize(src, QT.Q4_0)
    tensors["blk.0.ffn_down.weight"] = ("Q4_0", src, packed)
    w.add_tensor("blk.0.ffn_down.weight", packed, raw_dtype=QT.Q4_0)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tensors


def test_header_shapes_and_metadata(gguf_dump, model):
    path, tensors = model
    d = dump(gguf_dump, path)
    assert d["version"] == 3
    assert d["architecture"] == "llama"
    assert [t["name"] for t in d["tensors"]] == list(tensors)
    for t in d["tensors"]:
        ggml_type, src, _ = tensors[t["name"]]
        assert t["dtype"] == ggml_type
        assert tuple(t["shape"]) == src.shape  # row-major: ggml ne reversed

    m = d["metadata"]
    assert m["general.architecture"] == "llama"
    assert m["general.name"] == "tiny"
    assert m["llama.block_count"] == 1
    assert m["llama.attention.head_count"] == 8
    assert m["llama.attention.head_count_kv"] == 2
    assert m["llama.context_length"] == 4096
    assert m["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))
    assert m["general.test_flag"] is True
    assert m["general.tags"] == ["a", "b", "c"]
    assert m["tokenizer.ggml.tokens"] == {"gguf_array_type": "STRING", "length": 300}
    assert m["tokenizer.ggml.scores"] == {"gguf_array_type": "FLOAT32", "length": 300}
    assert d["alignment"] == 32 and d["data_offset"] % 32 == 0


def test_offsets_agree_with_gguf_reader(gguf_dump, model):
    path, _ = model
    d = dump(gguf_dump, path)
    reader = gguf.GGUFReader(path)
    ours = {t["name"]: t for t in d["tensors"]}
    assert len(reader.tensors) == len(ours)
    for rt in reader.tensors:
        t = ours[rt.name]
        assert t["offset"] == rt.data_offset
        assert t["nbytes"] == rt.n_bytes
        assert t["dtype"] == rt.tensor_type.name


def test_values(gguf_dump, model, tmp_path):
    path, tensors = model
    for name, (ggml_type, src, stored) in tensors.items():
        got = extract(gguf_dump, path, name, tmp_path)
        if ggml_type == "F32":
            np.testing.assert_array_equal(got, src.ravel())
        elif ggml_type == "F16":
            np.testing.assert_array_equal(got, stored.astype(np.float32).ravel())
        else:
            ref = gguf.quants.dequantize(stored, QT[ggml_type])
            assert ref.shape == src.shape
            np.testing.assert_array_equal(got, ref.ravel())  # the same f32 operations: exact
            # and the quantisation itself is close to the source (|err| <= d / 2 per block)
            assert np.max(np.abs(got - src.ravel())) < (0.05 if ggml_type == "Q8_0" else 0.5)


def test_unsupported_type_is_listed_not_decoded(gguf_dump, model, tmp_path):
    path, _ = model
    q8k = tmp_path / "q8k.gguf"  # Q8_K: ggml's dot-product intermediate, which gguf-py cannot decode either
    w = gguf.GGUFWriter(q8k, "llama")
    w.add_tensor("blk.0.ffn_down.weight", np.zeros((2, 292), dtype=np.uint8), raw_dtype=QT.Q8_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert dump(gguf_dump, q8k)["tensors"][0]["dtype"] == "Q8_K"
    r = run(gguf_dump, q8k, "blk.0.ffn_down.weight", tmp_path / "x.f32")
    assert r.returncode == 2
    assert "cannot dequantise ggml type Q8_K" in r.stderr
    r = run(gguf_dump, path, "no.such.tensor", tmp_path / "x.f32")
    assert r.returncode == 2
    assert "no such tensor" in r.stderr


def test_v2_file(gguf_dump, model, tmp_path):
    # v2 and v3 share the little-endian layout byte for byte; only the version field differs.
    path, tensors = model
    data = bytearray(path.read_bytes())
    assert data[4:8] == (3).to_bytes(4, "little")
    data[4:8] = (2).to_bytes(4, "little")
    v2 = tmp_path / "v2.gguf"
    v2.write_bytes(bytes(data))
    d = dump(gguf_dump, v2)
    assert d["version"] == 2
    assert [t["name"] for t in d["tensors"]] == list(tensors)
    got = extract(gguf_dump, v2, "token_embd.weight", tmp_path)
    np.testing.assert_array_equal(got, tensors["token_embd.weight"][1].ravel())


def test_v1_rejected(gguf_dump, model, tmp_path):
    path, _ = model
    data = bytearray(path.read_bytes())
    data[4:8] = (1).to_bytes(4, "little")
    v1 = tmp_path / "v1.gguf"
    v1.write_bytes(bytes(data))
    r = run(gguf_dump, v1)
    assert r.returncode == 2
    assert "version 1 is not supported" in r.stderr


@pytest.mark.parametrize("keep", [3, 30, 200, -1])
def test_truncated_file(gguf_dump, model, tmp_path, keep):
    path, _ = model
    data = path.read_bytes()
    cut = tmp_path / f"cut{keep}.gguf"
    cut.write_bytes(data[:keep] if keep >= 0 else data[:-1])
    r = run(gguf_dump, cut)
    assert r.returncode == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(cut) in lines[0]
    assert r.stdout == ""
