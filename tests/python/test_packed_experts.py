"""Packed mixture-of-experts tensors read as one matrix per expert (formats/packed_experts.hpp): the
transformers-v5 layout ([E, 2I, H] gate/up chunked, [E, H, I] down), gpt-oss ([E, H, 2I] x @ W with gate
and up interleaved, biases [E, ·]), Llama 4 ([E, H, 2I] x @ W, chunked) and GGUF *_exps (F32 and a
block type, checked against gguf-py's dequantizer). Each expert's matrix equals numpy's slice of the true
packed weights as the model computes with it; σ in analyze equals numpy's on it (1e-12 relative, F32
storage); every expert present once with its layer, role and expert index; edits written back packed."""
import csv
import json
import subprocess

import gguf
import numpy as np
import pytest

import quantized_fixtures as qf
from safetensors.numpy import load_file
from conftest import assert_input_error, run, tool


def dump(d, name, tmp_path, shape):
    out = tmp_path / "t.f32"
    p = subprocess.run([tool("tensor_dump"), str(d), name, str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return np.fromfile(out, dtype=np.float32).reshape(shape).astype(np.float64)


def write_hf(d, tensors, config):
    d.mkdir()
    qf.write_safetensors(d / "model.safetensors", {k: qf.plain(v) for k, v in tensors.items()})
    (d / "config.json").write_text(json.dumps(config))


def layouts(rng, E, H, I):
    """(model_type config, stored tensors, {per-expert name: true out × in matrix}) per layout."""
    out = {}
    gate = rng.standard_normal((E, I, H)).astype(np.float32)
    up = rng.standard_normal((E, I, H)).astype(np.float32)
    down = rng.standard_normal((E, H, I)).astype(np.float32)
    truth = {}
    for e in range(E):
        truth[f"model.layers.0.mlp.experts.{e}.gate_proj.weight"] = gate[e]
        truth[f"model.layers.0.mlp.experts.{e}.up_proj.weight"] = up[e]
        truth[f"model.layers.0.mlp.experts.{e}.down_proj.weight"] = down[e]
    # transformers v5: gate_up_proj [E, 2I, H] = concat(gate, up) along the output rows; F.linear(x, W).
    out["v5"] = ({"model_type": "qwen3_moe", "hidden_size": H},
                 {"model.layers.0.mlp.experts.gate_up_proj": np.concatenate([gate, up], axis=1),
                  "model.layers.0.mlp.experts.down_proj": down}, truth)
    # gpt-oss: x @ gate_up_proj [E, H, 2I], gate = [..., ::2], up = [..., 1::2]; down_proj [E, I, H].
    gu = np.empty((E, H, 2 * I), np.float32)
    gu[..., ::2], gu[..., 1::2] = gate.transpose(0, 2, 1), up.transpose(0, 2, 1)
    bias_gu = rng.standard_normal((E, 2 * I)).astype(np.float32)
    bias_down = rng.standard_normal((E, H)).astype(np.float32)
    out["gpt_oss"] = ({"model_type": "gpt_oss", "hidden_size": H},
                      {"model.layers.0.mlp.experts.gate_up_proj": gu,
                       "model.layers.0.mlp.experts.gate_up_proj_bias": bias_gu,
                       "model.layers.0.mlp.experts.down_proj": down.transpose(0, 2, 1).copy(),
                       "model.layers.0.mlp.experts.down_proj_bias": bias_down}, truth)
    # Llama 4: x @ gate_up_proj [E, H, 2I], gate, up = chunk(2, dim=-1); down_proj [E, I, H]; hidden
    # size only in text_config.
    out["llama4"] = ({"model_type": "llama4", "text_config": {"model_type": "llama4_text", "hidden_size": H}},
                     {"model.layers.0.mlp.experts.gate_up_proj": np.concatenate([gate, up], axis=1).transpose(0, 2, 1).copy(),
                      "model.layers.0.mlp.experts.down_proj": down.transpose(0, 2, 1).copy()}, truth)
    return out


@pytest.mark.parametrize("layout", ["v5", "gpt_oss", "llama4"])
@pytest.mark.parametrize("E,H,I", [(4, 32, 24), (3, 48, 48)])
def test_packed_experts_are_one_matrix_each(tmp_path, layout, E, H, I):
    rng = np.random.default_rng(E * 100 + H + I)
    config, stored, truth = layouts(rng, E, H, I)[layout]
    d = tmp_path / layout
    write_hf(d, stored, config)
    for name, w in truth.items():
        np.testing.assert_array_equal(dump(d, name, tmp_path, w.shape), w.astype(np.float64), err_msg=name)
    info = json.loads(run(["inspect", d, "--json"]).stdout)
    got = {t["name"]: t for t in info["tensors"]}
    assert info["packed_experts"] == (4 if layout == "gpt_oss" else 2)
    for name in truth:
        assert got[name]["layer"] == 0 and got[name]["expert"] == int(name.split(".")[5])
        assert got[name]["role"] == {"gate_proj": "mlp_gate", "up_proj": "mlp_up", "down_proj": "mlp_down"}[name.split(".")[6]]
    assert not [n for n in got if n.endswith("_proj") or n.endswith("_bias")]  # no packed tensor left whole
    if layout == "gpt_oss":
        assert got["model.layers.0.mlp.experts.2.gate_up_proj.bias"]["shape"] == [2 * I]
    run(["analyze", d, "--out", tmp_path / "an", "--store", tmp_path / "s.sqlite", "--quiet"])
    with open(tmp_path / "an" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f)]
    assert sorted(r["tensor"] for r in rows) == sorted(truth)  # every expert once, no bias as a matrix
    for r in rows:
        s = np.linalg.svd(truth[r["tensor"]].astype(np.float64), compute_uv=False)
        assert float(r["l2_norm"]) == pytest.approx(s[0], rel=1e-12)
        assert float(r["frob_norm"]) == pytest.approx(np.sqrt((s ** 2).sum()), rel=1e-12)
    # compare: a copy whose expert 1 alone moved.
    moved = {k: v.copy() for k, v in stored.items()}
    key = "model.layers.0.mlp.experts.down_proj"
    moved[key][1] += 0.5
    write_hf(tmp_path / "moved", moved, config)
    run(["compare", "--base", d, tmp_path / "moved", "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite", "--quiet"])
    with open(tmp_path / "c" / "compare.csv") as f:
        delta = {r["tensor"]: float(r["delta_frob_norm"]) for r in csv.DictReader(f)}
    changed = {n for n, v in delta.items() if v > 0}
    assert changed == {"model.layers.0.mlp.experts.1.down_proj.weight"}
    # An edit writes the packed layout back: the stored names, expert 1's slice interpolated, the rest as stored.
    run(["edit", "interpolate", d, tmp_path / "moved", "--omega", "0.5", "--out", tmp_path / "e", "--quiet"])
    out = load_file(str(tmp_path / "e" / "model.safetensors"))
    assert sorted(out) == sorted(stored)
    for k, v in out.items():
        expected = stored[k].copy()
        expected[1] = (0.5 * stored[k][1].astype(np.float64) + 0.5 * moved[k][1].astype(np.float64)).astype(np.float32)
        np.testing.assert_array_equal(v, expected, err_msg=k)


def test_orientation_contradicting_hidden_size_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    write_hf(tmp_path / "m", {"model.layers.0.mlp.experts.down_proj": rng.standard_normal((2, 8, 12)).astype(np.float32)},
             {"model_type": "qwen3_moe", "hidden_size": 16})
    assert_input_error(run(["inspect", tmp_path / "m"], check=False), "experts.down_proj", "hidden_size 16")


@pytest.mark.parametrize("qtype", [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.Q8_0])
def test_gguf_exps_are_one_matrix_per_expert(tmp_path, qtype):
    rng = np.random.default_rng(3)
    E, H, I = 3, 64, 32
    packed = {"blk.0.ffn_gate_exps.weight": rng.standard_normal((E, I, H)).astype(np.float32),
              "blk.0.ffn_up_exps.weight": rng.standard_normal((E, I, H)).astype(np.float32),
              "blk.0.ffn_down_exps.weight": rng.standard_normal((E, H, I)).astype(np.float32)}
    path = tmp_path / "moe.gguf"
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_block_count(1)
    truth = {}
    for name, data in packed.items():
        if qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, data)
            dense = data
        else:
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, q, raw_dtype=qtype)
            dense = gguf.quants.dequantize(q, qtype).reshape(data.shape)  # gguf-py's own dequantizer
        for e in range(E):
            truth[name.replace(".weight", f".{e}.weight")] = dense[e]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for name, m in truth.items():
        np.testing.assert_array_equal(dump(path, name, tmp_path, m.shape), m.astype(np.float64), err_msg=name)
    info = {t["name"]: t for t in json.loads(run(["inspect", path, "--json"]).stdout)["tensors"]}
    assert info["blk.0.ffn_gate_exps.2.weight"]["role"] == "mlp_gate"
    assert info["blk.0.ffn_down_exps.1.weight"]["expert"] == 1
    assert "blk.0.ffn_up_exps.weight" not in info
