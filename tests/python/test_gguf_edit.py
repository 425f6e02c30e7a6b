"""Edits take GGUF inputs and write GGUF: a GGUF primary gives an output directory holding the edited
GGUF under the primary's file name.

The Llama checkpoints are converted here as convert_hf_to_gguf.py does (test_gguf_rope.convert: Q/K
rows in the RoPE layout, F32 or quantised). The output is read back with gguf-py's own reader (an
independent parser) and checked against numpy:
- untouched tensors keep their stored bytes and ggml type (quantised blocks included);
- an edited tensor is F32 (or its plain dtype), its values the edit of the dequantised inputs in
  Hugging Face row order, stored back in the RoPE layout (exact: rewind copies, interpolation to 1e-6
  relative, the f32 rounding of f64 arithmetic);
- the metadata is the source's, and interpolation at omega 0 and 1 reproduces the input file byte
  for byte;
- inputs may mix namings: a GGUF edited with the Hugging Face base it came from.
"""
import json

import numpy as np
import pytest

from conftest import assert_input_error, run

gguf = pytest.importorskip("gguf")
st = pytest.importorskip("safetensors.numpy")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from test_gguf_rope import HEAD_DIM, HIDDEN, LAYERS, N_HEAD, N_KV, convert, gguf_name, hf_tensors  # noqa: E402


def unpermute(x, n):
    """numpy's inverse of the converter's permute (n heads of HEAD_DIM rows)."""
    return x.reshape(n, HEAD_DIM // 2, 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def read_gguf(path):
    """name -> (ggml type, raw bytes, values in HF row order as f64) through gguf-py's reader."""
    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
        if ".attn_q." in t.name:
            values = unpermute(values, N_HEAD)
        elif ".attn_k." in t.name:
            values = unpermute(values, N_KV)
        out[t.name] = (t.tensor_type, bytes(np.ascontiguousarray(t.data).tobytes()), values)
    return r, out


def fields(reader):
    return {k: (f.types, [bytes(p.tobytes()) for p in f.parts]) for k, f in reader.fields.items()}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    base = hf_tensors(np.random.default_rng(5))
    rng = np.random.default_rng(6)
    ft = {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in base.items()}
    hf_dir = d / "base"
    hf_dir.mkdir()
    st.save_file(base, str(hf_dir / "model.safetensors"))
    (hf_dir / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": 96, "num_attention_heads": N_HEAD, "num_key_value_heads": N_KV,
        "num_hidden_layers": LAYERS, "vocab_size": 128, "rms_norm_eps": 1e-5}))
    files = {}
    for label, tensors, qtype in (("base", base, "F32"), ("ft", ft, "F32"), ("ft_q8", ft, QT.Q8_0)):
        files[label] = d / f"{label}.gguf"
        files[label + "_stored"] = convert(tensors, files[label], qtype)
    heads = d / "heads.csv"
    heads.write_text("layer,head\n0,0\n0,1\n1,3\n")  # layer 0: a whole K/V group
    return {"hf": hf_dir, "base_t": base, "ft_t": ft, "heads": heads, "dir": d, **files}


def by_gguf_name(tensors):
    return {gguf_name(k): v.astype(np.float64) for k, v in tensors.items()}


@pytest.mark.parametrize("model", ["ft", "ft_q8"])
@pytest.mark.parametrize("base", ["hf", "base"])
def test_rewind_of_a_gguf_restores_whole_heads_in_the_rope_layout(llama, tmp_path, model, base):
    out = tmp_path / "rw"
    run(["edit", "rewind", "--base", llama[base], "--model", llama[model], "--heads", llama["heads"],
         "--out", out, "--quiet", "--store", tmp_path / "s.sqlite"])
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{model}.gguf", "diffract_edit.json",
                                                            "rewound_heads.csv"])
    src_reader, src = read_gguf(llama[model])
    reader, got = read_gguf(out / f"{model}.gguf")
    assert fields(reader) == fields(src_reader)  # the metadata as stored
    assert list(got) == list(src)
    b = by_gguf_name(llama["base_t"])
    rewound = {0: {0, 1}, 1: {3}}
    rewritten = 0
    for name, (qtype, raw, values) in got.items():
        src_type, src_raw, src_values = src[name]
        layer = int(name.split(".")[1]) if name.startswith("blk.") else None
        role = name.split(".")[2] if layer is not None else ""
        if role not in ("attn_q", "attn_k", "attn_v", "attn_output") or not name.endswith("weight"):
            assert (qtype, raw) == (src_type, src_raw), name  # copied as stored, quantised or not
            continue
        expect = src_values.copy()
        touched = False
        for h in rewound[layer]:
            if role == "attn_output":
                expect[:, h * HEAD_DIM:(h + 1) * HEAD_DIM] = b[name][:, h * HEAD_DIM:(h + 1) * HEAD_DIM]
            else:
                kv = h // (N_HEAD // N_KV)
                r = h if role == "attn_q" else kv  # kv-policy all: K/V of a group rewound only if all are
                if role != "attn_q" and not all(x in rewound[layer] for x in range(kv * 2, kv * 2 + 2)):
                    continue
                expect[r * HEAD_DIM:(r + 1) * HEAD_DIM] = b[name][r * HEAD_DIM:(r + 1) * HEAD_DIM]
            touched = True
        if not touched:  # no rewound head in it (layer 1's K/V group is not whole): kept as stored
            assert (qtype, raw) == (src_type, src_raw), name
            continue
        assert qtype == QT.F32, name  # edited: F32
        rewritten += 1
        np.testing.assert_array_equal(values, expect, err_msg=name)
        if role == "attn_q" or layer == 0:
            assert not np.array_equal(values, src_values), name  # a head really was rewound
    # Layer 0: q, k, v, o; layer 1: q and o (its K/V group is not whole). The counts say so.
    assert rewritten == 6
    record = json.loads((out / "diffract_edit.json").read_text())
    assert record["tensors_edited"] == rewritten and record["tensors_changed"] == rewritten


def test_a_rewound_gguf_compares_with_the_base_as_rewound(llama, tmp_path):
    # diffract reads its own output: the rewound heads have zero delta to the base, the others not.
    out = tmp_path / "rw"
    run(["edit", "rewind", "--base", llama["hf"], "--model", llama["ft"], "--heads", llama["heads"],
         "--out", out, "--quiet", "--store", tmp_path / "s.sqlite"])
    run(["compare", "--base", llama["hf"], out, "--out", tmp_path / "c", "--quiet", "--store",
         tmp_path / "s.sqlite", "--roles", "attn_q,attn_o"])
    import csv
    rows = [r for r in csv.DictReader(open(tmp_path / "c" / "compare.csv")) if r["head"] != ""]
    assert len(rows) == LAYERS * 2 * N_HEAD
    for r in rows:
        zero = (int(r["layer"]), int(r["head"])) in {(0, 0), (0, 1), (1, 3)}
        assert (float(r["delta_frob_norm"]) == 0.0) == zero, (r["tensor"], r["head"])


def test_interpolation_of_ggufs_is_the_input_at_the_endpoints(llama, tmp_path):
    for omega, which in ((0, "ft"), (1, "base")):
        out = tmp_path / f"i{omega}"
        run(["edit", "interpolate", llama["ft"], llama["base"], "--omega", str(omega), "--out", out, "--quiet"])
        assert (out / f"{which}.gguf").read_bytes() == llama[which].read_bytes()


@pytest.mark.parametrize("other", ["hf", "base"])
def test_interpolation_between_a_gguf_and_its_base(llama, tmp_path, other):
    out = tmp_path / "mid"
    run(["edit", "interpolate", llama["ft_q8"], llama[other], "--omega", "0.25", "--out", out, "--quiet"])
    _, got = read_gguf(out / "ft_q8.gguf")
    _, src = read_gguf(llama["ft_q8"])
    b = by_gguf_name(llama["base_t"])
    carried = json.loads((out / "diffract_edit.json").read_text())["only_in_primary"]
    for name, (qtype, raw, values) in got.items():
        if other == "hf" and "norm" in name:
            # Norms pair across namings by name only (formats::counterpart): carried from the primary,
            # listed as such.
            assert name in carried and (qtype, raw) == src[name][:2], name
            continue
        assert qtype == QT.F32, name  # every floating tensor is interpolated, the Q8_0 ones written F32
        expect = 0.75 * src[name][2] + 0.25 * b[name]
        np.testing.assert_allclose(values, expect, rtol=1e-6, atol=1e-7, err_msg=name)
    assert other == "base" or len(carried) == 2 * LAYERS + 1


def test_every_edit_writes_a_gguf_that_gguf_py_reads(llama, tmp_path):
    # (arguments, the primary input whose file name and layout the output takes)
    edits = {
        "truncate": (["truncate", "--base", llama["hf"], "--model", llama["ft_q8"], "--rank", "2"], "ft_q8"),
        "transplant": (["transplant", "--base", llama["base"], "--model", llama["ft_q8"]], "ft_q8"),
        "permute": (["permute", "--model", llama["ft_q8"]], "ft_q8"),
        "merge": (["merge", "--base", llama["base"], "--models", f"{llama['ft_q8']},{llama['ft']}"], "base"),
    }
    for kind, (args, primary) in edits.items():
        _, src = read_gguf(llama[primary])
        out = tmp_path / kind
        run(["edit", *args, "--out", out, "--quiet"])
        _, got = read_gguf(out / f"{primary}.gguf")
        assert list(got) == list(src), kind
        edited = [n for n in got if got[n][1] != src[n][1]]
        assert edited, kind
        for n in edited:
            assert got[n][0] == QT.F32 and got[n][2].shape == src[n][2].shape, (kind, n)
        prov = json.loads((out / "diffract_edit.json").read_text())
        assert prov["edit"] == kind and prov["inputs"][0]["path"] == str(llama[primary])
    # merge of two fine-tunes into the GGUF base: task arithmetic in HF order, to f32 rounding.
    _, got = read_gguf(tmp_path / "merge" / "base.gguf")
    _, q8 = read_gguf(llama["ft_q8"])
    b = by_gguf_name(llama["base_t"])
    for name, (_, _, values) in got.items():
        expect = b[name] + (q8[name][2] - b[name]) + (by_gguf_name(llama["ft_t"])[name] - b[name])
        np.testing.assert_allclose(values, expect, rtol=1e-5, atol=1e-6, err_msg=name)


def test_mixed_naming_refuses_mismatched_shapes(llama, tmp_path):
    # A GGUF whose K has other heads than the HF base: the message names the file and the tensor.
    tensors = dict(llama["base_t"])
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((N_HEAD * HEAD_DIM, HIDDEN), np.float32)
    d = tmp_path / "other"
    d.mkdir()
    st.save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text((llama["hf"] / "config.json").read_text())
    p = run(["edit", "interpolate", llama["ft"], d, "--omega", "0.5", "--out", tmp_path / "o", "--quiet"],
            check=False)
    assert_input_error(p, "model.layers.0.self_attn.k_proj.weight", "shape differs")
    assert not (tmp_path / "o").exists()


def test_as_lora_refuses_gguf_names(llama, tmp_path):
    p = run(["edit", "truncate", "--as-lora", "--rank", "2", "--base", llama["hf"], "--model", llama["ft"],
             "--out", tmp_path / "a", "--quiet"], check=False)
    assert_input_error(p, str(llama["ft"]), "PEFT adapter", "gguf")
    assert not (tmp_path / "a").exists()


def test_an_edited_gguf_loads_in_transformers(llama, tmp_path):
    # transformers' own GGUF loader (dequantisation and the inverse RoPE permutation of its own) reads
    # the rewound Q8_0 GGUF: its q/k/o weights are the expected HF-order values and it runs.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "rw"
    run(["edit", "rewind", "--base", llama["hf"], "--model", llama["ft_q8"], "--heads", llama["heads"],
         "--out", out, "--quiet", "--store", tmp_path / "s.sqlite"])
    # (the test GGUF has no tokenizer metadata, so the vocabulary size is given)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out), gguf_file="ft_q8.gguf",
                                                              vocab_size=128).eval()
    sd = {k: v.double().numpy() for k, v in model.state_dict().items()}
    _, got = read_gguf(out / "ft_q8.gguf")  # gguf-py's view, checked above against numpy
    for layer in range(LAYERS):
        for hf, g in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("o_proj", "attn_output")):
            np.testing.assert_allclose(sd[f"model.layers.{layer}.self_attn.{hf}.weight"],
                                       got[f"blk.{layer}.{g}.weight"][2], rtol=0, atol=1e-6, err_msg=hf)
    b = llama["base_t"]["model.layers.0.self_attn.q_proj.weight"]
    np.testing.assert_array_equal(sd["model.layers.0.self_attn.q_proj.weight"][:2 * HEAD_DIM], b[:2 * HEAD_DIM])
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 4]])).logits
    assert torch.isfinite(logits).all()


def test_editing_an_edited_gguf_file_records_its_provenance(llama, tmp_path):
    # The primary given as the .gguf file itself (not its directory): its diffract_edit.json beside it.
    first = tmp_path / "first"
    run(["edit", "truncate", "--base", llama["base"], "--model", llama["ft"], "--rank", "2", "--out", first,
         "--quiet"])
    second = tmp_path / "second"
    run(["edit", "truncate", "--base", llama["base"], "--model", first / "ft.gguf", "--rank", "1", "--out", second,
         "--quiet"])
    record = json.loads((second / "diffract_edit.json").read_text())
    assert record["input_provenance"]["edit"] == "truncate"
    assert record["input_provenance"]["parameters"] == {"rank": 2}
