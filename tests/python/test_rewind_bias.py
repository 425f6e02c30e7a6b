"""Rewind restores the whole head: the Q/K/V bias slices of a rewound head take the base's values
with its weight blocks (separate BERT projections, GPT-2's fused and transposed c_attn); the shared O
bias follows --o-bias (issue 14, "Rewind restores the whole head").

Independent check: the expected tensors are built here with numpy from the two inputs and the head
geometry, and the output is read with the safetensors package.
"""

import csv
import json

import numpy as np
import pytest

from conftest import run

st = pytest.importorskip("safetensors.numpy")

H, D, L = 4, 8, 2  # heads, head dim, layers
E = H * D


def bert_tensors(rng):
    t = {}
    for i in range(L):
        p = f"encoder.layer.{i}.attention"
        for proj in ("query", "key", "value"):
            t[f"{p}.self.{proj}.weight"] = rng.normal(size=(E, E)).astype(np.float32)
            t[f"{p}.self.{proj}.bias"] = rng.normal(size=(E,)).astype(np.float32)
        t[f"{p}.output.dense.weight"] = rng.normal(size=(E, E)).astype(np.float32)
        t[f"{p}.output.dense.bias"] = rng.normal(size=(E,)).astype(np.float32)
    return t


def gpt2_tensors(rng):
    t = {}
    for i in range(L):
        t[f"h.{i}.attn.c_attn.weight"] = rng.normal(size=(E, 3 * E)).astype(np.float32)  # Conv1D: [in, out]
        t[f"h.{i}.attn.c_attn.bias"] = rng.normal(size=(3 * E,)).astype(np.float32)
        t[f"h.{i}.attn.c_proj.weight"] = rng.normal(size=(E, E)).astype(np.float32)
        t[f"h.{i}.attn.c_proj.bias"] = rng.normal(size=(E,)).astype(np.float32)
    return t


CONFIGS = {
    "bert": ({"model_type": "bert", "architectures": ["BertModel"], "num_attention_heads": H, "hidden_size": E,
              "num_hidden_layers": L, "intermediate_size": 4 * E}, bert_tensors),
    "gpt2": ({"model_type": "gpt2", "architectures": ["GPT2Model"], "n_head": H, "n_embd": E, "n_layer": L},
             gpt2_tensors),
}


def write_model(d, config, tensors):
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    st.save_file(tensors, str(d / "model.safetensors"))


def qkv_bias_slices(arch, layer, head):
    """{bias tensor name: slice of the head's Q, K and V rows}."""
    rows = slice(head * D, (head + 1) * D)
    if arch == "bert":
        return {f"encoder.layer.{layer}.attention.self.{p}.bias": rows for p in ("query", "key", "value")}
    return {f"h.{layer}.attn.c_attn.bias": [np.r_[k * E + head * D : k * E + (head + 1) * D] for k in range(3)]}


def o_bias_name(arch, layer):
    return f"encoder.layer.{layer}.attention.output.dense.bias" if arch == "bert" else f"h.{layer}.attn.c_proj.bias"


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
@pytest.mark.parametrize("o_bias", ["keep", "base"])
def test_rewound_head_takes_its_bias_slices(tmp_path, arch, o_bias):
    config, make = CONFIGS[arch]
    base_t, model_t = make(np.random.default_rng(1)), make(np.random.default_rng(2))
    write_model(tmp_path / "base", config, base_t)
    write_model(tmp_path / "model", config, model_t)
    heads = tmp_path / "heads.csv"
    heads.write_text("layer,head\n0,1\n")
    out = tmp_path / "out"
    run(["edit", "rewind", "--base", tmp_path / "base", "--model", tmp_path / "model", "--heads", heads,
         "--o-bias", o_bias, "--out", out])
    got = st.load_file(str(out / "model.safetensors"))

    expected = {k: v.copy() for k, v in model_t.items() if k.endswith("bias")}
    for name, sl in qkv_bias_slices(arch, 0, 1).items():
        for s in sl if isinstance(sl, list) else [sl]:
            expected[name][s] = base_t[name][s]
    if o_bias == "base":
        expected[o_bias_name(arch, 0)] = base_t[o_bias_name(arch, 0)]
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    # The untouched layer keeps every bias byte of the model.
    assert np.array_equal(got[o_bias_name(arch, 1)], model_t[o_bias_name(arch, 1)])
    rows = list(csv.DictReader(open(out / "rewound_heads.csv")))
    assert [r["o_bias"] for r in rows] == [o_bias]
    assert json.loads((out / "diffract_edit.json").read_text())["parameters"]["o_bias"] == o_bias


def test_o_bias_value_is_validated(tmp_path):
    config, make = CONFIGS["bert"]
    write_model(tmp_path / "m", config, make(np.random.default_rng(1)))
    heads = tmp_path / "heads.csv"
    heads.write_text("0,1\n")
    p = run(["edit", "rewind", "--base", tmp_path / "m", "--model", tmp_path / "m", "--heads", heads,
             "--o-bias", "half", "--out", tmp_path / "out"], check=False)
    assert p.returncode == 2 and "--o-bias" in p.stderr


def test_a_grouped_qkv_is_rewound_by_its_groups(tmp_path):
    # InternLM2 fuses q/k/v into wqkv grouped by key/value head ([q × group; k; v] per group: the
    # exceptions table of model/schema.cpp). Rewinding query head 1 takes its own rows of wqkv (rows
    # 16..31 of group 0) and its columns of wo back to the base; query head 0's rows stay the model's.
    config = {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
              "intermediate_size": 128}
    weights = {}
    for name, seed in (("base", 0), ("tuned", 1)):
        rng = np.random.default_rng(seed)
        shapes = {
            "model.tok_embeddings.weight": (32, 64),
            "model.layers.0.attention.wqkv.weight": (128, 64),
            "model.layers.0.attention.wo.weight": (64, 64),
            "model.layers.0.feed_forward.w1.weight": (128, 64),
            "model.layers.0.feed_forward.w3.weight": (128, 64),
            "model.layers.0.feed_forward.w2.weight": (64, 128),
            "output.weight": (32, 64)}
        weights[name] = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
        write_model(tmp_path / name, config, weights[name])
    (tmp_path / "heads.csv").write_text("layer,head\n0,1\n")
    run(["edit", "rewind", "--base", tmp_path / "base", "--model", tmp_path / "tuned", "--heads",
         tmp_path / "heads.csv", "--out", tmp_path / "out", "--store", tmp_path / "s.sqlite", "--quiet"])
    from safetensors.numpy import load_file
    out = load_file(str(tmp_path / "out" / "model.safetensors"))
    qkv, wo = "model.layers.0.attention.wqkv.weight", "model.layers.0.attention.wo.weight"
    np.testing.assert_array_equal(out[qkv][16:32], weights["base"][qkv][16:32])  # head 1's query rows
    np.testing.assert_array_equal(out[qkv][0:16], weights["tuned"][qkv][0:16])  # head 0's stay tuned
    np.testing.assert_array_equal(out[qkv][64:80], weights["tuned"][qkv][64:80])  # group 1's head 2
    np.testing.assert_array_equal(out[wo][:, 16:32], weights["base"][wo][:, 16:32])
    np.testing.assert_array_equal(out[wo][:, 0:16], weights["tuned"][wo][:, 0:16])
