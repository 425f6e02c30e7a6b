"""Quantized safetensors read as their dense matrices: every scheme of docs/formats/quantized.md written
from its public description (quantized_fixtures.py), decoded by diffract and checked against the
reference dequantizer's dense matrix (relative 1e-6: an f32 decode's rounding), in tensor_dump (the
reader the analyses use), analyze (σ against numpy's SVD) and compare --base (the quantization error);
scale tensors never rows; inspect naming the scheme; unknown schemes and stray codes refused in one
line; edits refused."""
import csv
import json
import subprocess

import numpy as np
import pytest

import quantized_fixtures as qf
from conftest import assert_input_error, run, tool

HIDDEN, HEADS, KV, INTER, VOCAB = 64, 4, 2, 96, 128
PROJ = {"self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.k_proj": (KV * 16, HIDDEN),
        "self_attn.v_proj": (KV * 16, HIDDEN), "self_attn.o_proj": (HIDDEN, HIDDEN),
        "mlp.gate_proj": (INTER, HIDDEN), "mlp.up_proj": (INTER, HIDDEN), "mlp.down_proj": (HIDDEN, INTER)}


def config(quant=None, model_type="llama"):
    c = {"model_type": model_type, "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN,
         "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": 16, "num_hidden_layers": 1,
         "intermediate_size": INTER, "vocab_size": VOCAB}
    if quant is not None:
        c["quantization_config"] = quant
    return c


def true_weights(seed):
    rng = np.random.default_rng(seed)
    return {f"model.layers.0.{p}.weight": rng.standard_normal(s) * 0.05 for p, s in PROJ.items()}


def write_model(d, quant_cfg, encode, seed=0, dense_only=False):
    """A one-layer Llama: every projection through `encode(name, w, rng)` (unless dense_only), the rest F32.
    Returns (directory, true weights, reference dense of each logical matrix)."""
    rng = np.random.default_rng(seed + 100)
    d.mkdir(parents=True)
    w = true_weights(seed)
    tensors, dense = {}, {}
    tensors["model.embed_tokens.weight"] = qf.plain(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32))
    tensors["model.layers.0.input_layernorm.weight"] = qf.plain(np.ones(HIDDEN, np.float32))
    for name, m in w.items():
        if dense_only:
            tensors[name] = qf.plain(m.astype(np.float32))
            continue
        t, dn = encode(name, m, rng)
        tensors.update(t)
        dense.update(dn)
    tensors["lm_head.weight"] = qf.plain(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32))
    qf.write_safetensors(d / "model.safetensors", tensors)
    (d / "config.json").write_text(json.dumps(config(None if dense_only else quant_cfg)))
    return d, w, dense


def dump(d, name, tmp_path):
    out = tmp_path / "t.f32"
    p = subprocess.run([tool("tensor_dump"), str(d), name, str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return np.fromfile(out, dtype=np.float32)


def assert_decoded(d, dense, tmp_path):
    for name, ref in dense.items():
        got = dump(d, name, tmp_path).astype(np.float64).reshape(ref.shape)
        scale = np.abs(ref).max()
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * scale, err_msg=name)


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def ct(fmt, weights, **extra):
    return {"quant_method": "compressed-tensors", "format": fmt,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}, "ignore": ["lm_head"], **extra}


def prefix(name):
    return name[: -len(".weight")]


# (id, quantization_config, encoder): the schemes and their variants.
SCHEMES = [
    ("ct-fp8-tensor", ct("float-quantized", {"num_bits": 8, "type": "float", "strategy": "tensor"}),
     lambda n, w, r: qf.fp8(n, w, r, per="tensor", scale_dtype=np.float32)),
    ("ct-fp8-e5m2-tensor", ct("float-quantized", {"num_bits": 8, "type": "float", "strategy": "tensor"}),
     lambda n, w, r: qf.fp8(n, w, r, fmt="e5m2", per="tensor")),
    ("ct-fp8-channel-bf16", ct("float-quantized", {"num_bits": 8, "type": "float", "strategy": "channel"}),
     lambda n, w, r: qf.fp8(n, w, r, per="channel", scale_dtype=qf.ml_dtypes.bfloat16)),
    ("ct-fp8-group16", ct("float-quantized", {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 16}),
     lambda n, w, r: qf.fp8(n, w, r, per="group", group=16)),
    ("ct-fp8-block32", ct("float-quantized", {"num_bits": 8, "type": "float", "strategy": "block",
                                              "block_structure": [32, 32]}),
     lambda n, w, r: qf.fp8(n, w, r, per="block", block=(32, 32))),
    ("hf-fp8-block-ragged", {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                             "weight_block_size": [40, 48]},
     lambda n, w, r: qf.fp8(n, w, r, per="block", block=(40, 48), scale_suffix="_scale_inv")),
    ("hf-fp8-tensor-scalar", {"quant_method": "fp8", "weight_block_size": None},
     lambda n, w, r: qf.fp8(n, w, r, per="tensor", scale_suffix="_scale_inv", scale_shape_scalar=True)),
    ("gptq4-g32", {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": False},
     lambda n, w, r: qf.gptq(prefix(n), w, r, bits=4, group=32)),
    ("gptq4-actorder", {"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": True},
     lambda n, w, r: qf.gptq(prefix(n), w, r, bits=4, group=16, act_order=True)),
    ("gptq3-g32", {"quant_method": "gptq", "bits": 3, "group_size": 32},
     lambda n, w, r: qf.gptq(prefix(n), w, r, bits=3, group=32)),
    ("gptq2-channel", {"quant_method": "gptq", "bits": 2, "group_size": -1},
     lambda n, w, r: qf.gptq(prefix(n), w, r, bits=2, group=-1)),
    ("gptq8-v2", {"quant_method": "gptq", "bits": 8, "group_size": 32, "checkpoint_format": "gptq_v2"},
     lambda n, w, r: qf.gptq(prefix(n), w, r, bits=8, group=32, v2=True)),
    ("awq-gemm", {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm", "zero_point": True},
     lambda n, w, r: qf.awq(prefix(n), w, r, group=32)),
    ("ct-pack-int4", ct("pack-quantized", {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
                                           "symmetric": True}),
     lambda n, w, r: qf.packed_int(prefix(n), w, r, bits=4, group=32)),
    ("ct-pack-int8", ct("pack-quantized", {"num_bits": 8, "type": "int", "strategy": "group", "group_size": 16,
                                           "symmetric": True}),
     lambda n, w, r: qf.packed_int(prefix(n), w, r, bits=8, group=16)),
    ("ct-nvfp4", ct("nvfp4-pack-quantized", {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                             "group_size": 16}),
     lambda n, w, r: qf.nvfp4(prefix(n), w, r)),
    ("bnb-nf4", {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
     lambda n, w, r: qf.bnb_4bit(n, w, r, blocksize=64)),
    ("bnb-nf4-double", {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True},
     lambda n, w, r: qf.bnb_4bit(n, w, r, blocksize=32, double=True)),
    ("bnb-fp4", {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "fp4"},
     lambda n, w, r: qf.bnb_4bit(n, w, r, blocksize=64, kind="fp4")),
    ("bnb-int8", {"quant_method": "bitsandbytes", "load_in_8bit": True},
     lambda n, w, r: qf.bnb_int8(n, w, r)),
]


@pytest.mark.parametrize("scheme,cfg,encode", SCHEMES, ids=[s[0] for s in SCHEMES])
def test_each_scheme_decodes_to_the_reference_dense_matrix(tmp_path, scheme, cfg, encode):
    d, w, dense = write_model(tmp_path / "q", cfg, encode, seed=len(scheme))
    assert_decoded(d, dense, tmp_path)
    # inspect: one logical matrix per projection, named as transformers names it, the scheme named.
    info = json.loads(run(["inspect", d, "--json"]).stdout)
    names = {t["name"]: t for t in info["tensors"]}
    for name in w:
        assert names[name]["shape"] == list(w[name].shape), name
        assert names[name]["quantization"], name
        assert names[name]["role"] != "other"
    assert not [n for n in names if any(k in n for k in ("scale", "zero", "qweight", "g_idx", "absmax", "SCB",
                                                          "quant_map", "quant_state", "_packed", "_shape"))]
    assert info["quantization"]["scheme"] and sum(info["quantization"]["matrices"].values()) == len(w)
    assert info["heads"]["num_attention_heads"] == HEADS
    # analyze: every logical matrix once (and its heads), σ_max and ‖·‖_F of the reference's dense matrix.
    run(["analyze", d, "--out", tmp_path / "an", "--store", tmp_path / "s.sqlite", "--quiet"])
    got = rows(tmp_path / "an" / "metrics.csv")
    whole = {r["tensor"]: r for r in got if not r["head"]}
    assert set(whole) == set(w) | {"model.embed_tokens.weight", "lm_head.weight"}
    assert {r["tensor"] for r in got if r["head"]} == {n for n in w if "self_attn" in n}
    for name, ref in dense.items():
        s = np.linalg.svd(ref, compute_uv=False)
        assert float(whole[name]["l2_norm"]) == pytest.approx(s[0], rel=1e-6), name
        assert float(whole[name]["frob_norm"]) == pytest.approx(np.sqrt((s ** 2).sum()), rel=1e-6), name


@pytest.mark.parametrize("scheme,cfg,encode", [SCHEMES[i] for i in (4, 8, 12, 15, 17)],
                         ids=[SCHEMES[i][0] for i in (4, 8, 12, 15, 17)])
def test_compare_base_original_answers_what_quantization_did(tmp_path, scheme, cfg, encode):
    q, w, dense = write_model(tmp_path / "q", cfg, encode, seed=3)
    orig, _, _ = write_model(tmp_path / "orig", None, None, seed=3, dense_only=True)
    run(["compare", "--base", orig, q, "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite", "--quiet"])
    got = {r["tensor"]: r for r in rows(tmp_path / "c" / "compare.csv") if not r.get("head")}
    for name in w:
        err = np.linalg.norm(dense[name] - w[name].astype(np.float32).astype(np.float64))
        assert float(got[name]["delta_frob_norm"]) == pytest.approx(err, rel=1e-6, abs=1e-9), name
        assert 0 < err < 0.2 * np.linalg.norm(w[name])  # a quantization error, not codes taken as weights
    # A quantized base against a quantized model of another scheme.
    q2, _, dense2 = write_model(tmp_path / "q2", SCHEMES[0][1], SCHEMES[0][2], seed=3)
    run(["compare", "--base", q, q2, "--out", tmp_path / "c2", "--store", tmp_path / "s.sqlite", "--quiet"])
    got = {r["tensor"]: r for r in rows(tmp_path / "c2" / "compare.csv") if not r.get("head")}
    for name in w:
        err = np.linalg.norm(dense2[name] - dense[name])
        assert float(got[name]["delta_frob_norm"]) == pytest.approx(err, rel=1e-6, abs=1e-9), name


def test_gpt_oss_mxfp4_experts_are_one_matrix_each(tmp_path):
    rng = np.random.default_rng(5)
    E, H, I = 3, 64, 32
    d = tmp_path / "oss"
    d.mkdir()
    gate_up = rng.standard_normal((E, 2 * I, H)) * 0.1  # stored rows: gate even, up odd
    down = rng.standard_normal((E, H, I)) * 0.1
    t1, dense1 = qf.mxfp4_experts("model.layers.0.mlp.experts.gate_up_proj", gate_up, fused=True)
    t2, dense2 = qf.mxfp4_experts("model.layers.0.mlp.experts.down_proj", down, fused=False)
    tensors = {**t1, **t2, "model.layers.0.mlp.router.weight": qf.plain(rng.standard_normal((E, H)).astype(np.float32))}
    qf.write_safetensors(d / "model.safetensors", tensors)
    (d / "config.json").write_text(json.dumps({"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"],
                                                "hidden_size": H, "num_hidden_layers": 1, "num_local_experts": E,
                                                "quantization_config": {"quant_method": "mxfp4"}}))
    dense = {**dense1, **dense2}
    assert len(dense) == 3 * E
    assert_decoded(d, dense, tmp_path)
    info = json.loads(run(["inspect", d, "--json"]).stdout)
    names = [t["name"] for t in info["tensors"]]
    assert sorted(n for n in names if ".experts." in n) == sorted(dense)
    roles = {t["name"]: t["role"] for t in info["tensors"]}
    assert roles["model.layers.0.mlp.experts.1.gate_proj.weight"] == "mlp_gate"
    assert roles["model.layers.0.mlp.experts.2.down_proj.weight"] == "mlp_down"
    run(["analyze", d, "--out", tmp_path / "an", "--store", tmp_path / "s.sqlite", "--quiet"])
    whole = {r["tensor"]: r for r in rows(tmp_path / "an" / "metrics.csv")}
    for name, ref in dense.items():
        assert float(whole[name]["l2_norm"]) == pytest.approx(np.linalg.svd(ref, compute_uv=False)[0], rel=1e-6)


# ---- refusals: in one line, naming the file, the tensor and the scheme ----------------------------

@pytest.mark.parametrize("method", ["hqq", "aqlm", "eetq", "quanto"])
def test_a_scheme_that_is_not_decoded_is_refused_naming_it(tmp_path, method):
    d, _, _ = write_model(tmp_path / "q", {"quant_method": method}, lambda n, w, r: ({n: qf.plain(w.astype(np.float32))}, {}))
    info = json.loads(run(["inspect", d, "--json"]).stdout)  # inspect lists it and says so
    assert method in info["quantization"]["undecoded"]
    for cmd in (["analyze", d, "--out", tmp_path / "a"], ["compare", "--base", d, d, "--out", tmp_path / "c"]):
        assert_input_error(run([*cmd, "--store", tmp_path / "s.sqlite", "--quiet"], check=False), str(d), method)
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


@pytest.mark.parametrize("cfg,needle", [
    ({"quant_method": "gptq", "bits": 5}, "gptq with 5 bits"),
    ({"quant_method": "awq", "bits": 4, "version": "gemv"}, "awq version 'gemv'"),
    (ct("marlin-24", {"num_bits": 4}), "compressed-tensors format 'marlin-24'"),
])
def test_unsupported_variants_are_refused_naming_them(tmp_path, cfg, needle):
    d, _, _ = write_model(tmp_path / "q", cfg, lambda n, w, r: qf.gptq(prefix(n), w, r, bits=4, group=32))
    p = run(["analyze", d, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"], check=False)
    assert_input_error(p, needle)


def test_integer_codes_without_a_scheme_are_an_error_not_a_skip(tmp_path):
    """Packed weights whose config lost its quantization_config: exit 2 naming the tensor; --allow-partial
    skips them and the warning counts them."""
    cfg = {"quant_method": "gptq", "bits": 4, "group_size": 32}
    d, w, _ = write_model(tmp_path / "q", cfg, lambda n, w, r: qf.gptq(prefix(n), w, r, bits=4, group=32))
    (d / "config.json").write_text(json.dumps(config(None)))
    p = run(["analyze", d, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"], check=False)
    assert_input_error(p, ".qweight", "dtype I32", "not decoded")
    assert not (tmp_path / "a").exists()
    p = run(["analyze", d, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--allow-partial"])
    assert "7 selected matrices skipped" in p.stderr and "dtype I32 (7)" in p.stderr
    got = {r["tensor"] for r in rows(tmp_path / "a" / "metrics.csv")}
    assert got == {"model.embed_tokens.weight", "lm_head.weight"}


@pytest.mark.parametrize("damage,needle", [
    (lambda t: t.pop("model.layers.0.self_attn.q_proj.scales"), "without its tensor 'model.layers.0.self_attn.q_proj.scales'"),
    (lambda t: t.update({"model.layers.0.self_attn.q_proj.scales": qf.plain(np.ones((3, 64), np.float16))}), "shape [3, 64]"),
    (lambda t: t.update({"model.layers.0.self_attn.q_proj.g_idx": qf.plain(np.full(64, 9, np.int32))}), "g_idx[0] = 9"),
])
def test_malformed_pairings_name_the_tensor(tmp_path, damage, needle):
    rng = np.random.default_rng(1)
    tensors, _ = qf.gptq("model.layers.0.self_attn.q_proj", rng.standard_normal((64, 64)), rng, bits=4, group=32)
    damage(tensors)
    d = tmp_path / "m"
    d.mkdir()
    qf.write_safetensors(d / "model.safetensors", tensors)
    (d / "config.json").write_text(json.dumps(config({"quant_method": "gptq", "bits": 4, "group_size": 32})))
    assert_input_error(run(["inspect", d], check=False), needle)


def test_a_pack_quantized_group_index_naming_no_group_is_refused(tmp_path):
    """compressed-tensors' weight_g_idx is checked as GPTQ's g_idx is: a group past the scales is a
    refusal naming it, never a read outside the scale tensor."""
    rng = np.random.default_rng(4)
    tensors, _ = qf.packed_int("model.layers.0.self_attn.q_proj", rng.standard_normal((64, 64)), rng, bits=4, group=32)
    tensors["model.layers.0.self_attn.q_proj.weight_g_idx"] = qf.plain(np.full(64, 1000, np.int32))
    d = tmp_path / "m"
    d.mkdir()
    qf.write_safetensors(d / "model.safetensors", tensors)
    (d / "config.json").write_text(json.dumps(config(SCHEMES[13][1])))
    assert_input_error(run(["inspect", d], check=False), "weight_g_idx", "g_idx[0] = 1000 names no group")


def test_fp8_scales_without_a_config_are_paired_by_name(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((48, 64)) * 0.02
    tensors, dense = qf.fp8("layer.weight", w, rng, per="channel")
    qf.write_safetensors(tmp_path / "lone.safetensors", tensors)
    assert_decoded(tmp_path / "lone.safetensors", dense, tmp_path)
    info = json.loads(run(["inspect", tmp_path / "lone.safetensors", "--json"]).stdout)
    assert [t["name"] for t in info["tensors"]] == ["layer.weight"]
    assert info["tensors"][0]["dtype"] == "fp8 e4m3, per-channel"


def test_edits_of_quantized_checkpoints_are_refused(tmp_path):
    cfg, encode = SCHEMES[4][1], SCHEMES[4][2]
    q, _, _ = write_model(tmp_path / "q", cfg, encode, seed=1)
    orig, _, _ = write_model(tmp_path / "orig", None, None, seed=2, dense_only=True)
    p = run(["edit", "interpolate", orig, q, "--omega", "0.5", "--out", tmp_path / "e"], check=False)
    assert_input_error(p, "does not write quantized checkpoints", "fp8 e4m3, block 32×32")
    assert not (tmp_path / "e").exists()


def test_python_describe_names_the_scheme_as_inspect_does(tmp_path):
    import diffract_spectral as diffract
    cfg, encode = SCHEMES[8][1], SCHEMES[8][2]  # gptq act-order
    d, w, _ = write_model(tmp_path / "q", cfg, encode, seed=2)
    info = diffract.describe(str(d))
    assert info == json.loads(run(["inspect", d, "--json"]).stdout)
    kinds = {t["name"]: t["quantization"] for t in info["tensors"]}
    assert all(kinds[n].startswith("gptq int4 group 16") for n in w)
    assert info["quantization"]["scheme"].startswith("gptq")
