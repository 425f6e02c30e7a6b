"""A Hugging Face Llama checkpoint and its GGUF conversion give the same matrices and head blocks.

The GGUF files are written here as llama.cpp's convert_hf_to_gguf.py writes them (LlamaModel): GGUF
tensor names, Q and K rows permuted into the RoPE layout of each head (`permute` below, with
head_count for Q and head_count_kv for K), in F32 and F16. diffract undoes the permutation on read,
so `compare --base HF_DIR model.gguf` pairs every matrix by (layer, role) and finds it unchanged:
zero delta and agreement 1 (tolerance 1e-12 on the agreement means, exactly 0 for the deltas).
A Q8_0/Q4_0 quantised conversion is then compared with the HF checkpoint: the deltas are what
quantisation did, checked against numpy on gguf's dequantised values.
"""
import csv
import json

import numpy as np
import pytest

from conftest import run

gguf = pytest.importorskip("gguf")
st = pytest.importorskip("safetensors.numpy")
from gguf import GGMLQuantizationType as QT  # noqa: E402

N_HEAD, N_KV, HIDDEN, FFN, LAYERS, VOCAB = 4, 2, 64, 96, 2, 128
HEAD_DIM = HIDDEN // N_HEAD


def permute(w, n_head, n_head_kv):
    """LlamaModel.permute of convert_hf_to_gguf.py (re-derived: halves of each head interleaved)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_tensors(rng):
    """HF Llama tensors; values exact in f16, so the F16 conversion is lossless."""
    def mat(*shape):
        return rng.standard_normal(shape).astype(np.float16).astype(np.float32)
    t = {"model.embed_tokens.weight": mat(VOCAB, HIDDEN), "model.norm.weight": mat(HIDDEN),
         "lm_head.weight": mat(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": mat(N_HEAD * HEAD_DIM, HIDDEN),
                  p + "self_attn.k_proj.weight": mat(N_KV * HEAD_DIM, HIDDEN),
                  p + "self_attn.v_proj.weight": mat(N_KV * HEAD_DIM, HIDDEN),
                  p + "self_attn.o_proj.weight": mat(HIDDEN, N_HEAD * HEAD_DIM),
                  p + "mlp.gate_proj.weight": mat(FFN, HIDDEN), p + "mlp.up_proj.weight": mat(FFN, HIDDEN),
                  p + "mlp.down_proj.weight": mat(HIDDEN, FFN),
                  p + "input_layernorm.weight": mat(HIDDEN), p + "post_attention_layernorm.weight": mat(HIDDEN)})
    return t


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{GGUF_NAMES[module]}.{kind}"


def convert(tensors, path, qtype=None):
    """Writes the GGUF the converter would: permuted Q/K, F32/F16, or 2-D weights quantised to qtype."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(LAYERS)
    w.add_vocab_size(VOCAB)  # what transformers' GGUF loader sizes the embedding by
    w.add_context_length(2048)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    stored = {}
    for name, x in tensors.items():
        if name.endswith("q_proj.weight"):
            x = permute(x, N_HEAD, N_HEAD)
        elif name.endswith("k_proj.weight"):
            x = permute(x, N_HEAD, N_KV)
        if x.ndim == 1 or qtype is None or qtype == "F32":
            data, raw = x.astype(np.float32), None
        elif qtype == "F16":
            data, raw = x.astype(np.float16), None
        else:
            data, raw = gguf.quants.quantize(x, qtype), qtype
        stored[name] = (data, raw)
        w.add_tensor(gguf_name(name), data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf") / "tiny-llama"
    d.mkdir()
    tensors = hf_tensors(np.random.default_rng(11))
    st.save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": FFN, "num_attention_heads": N_HEAD, "num_key_value_heads": N_KV,
        "num_hidden_layers": LAYERS, "vocab_size": VOCAB, "rms_norm_eps": 1e-5}))
    return d, tensors


def compare(base, model, out, *extra):
    run(["compare", "--base", base, model, "--out", out, "--store", out.parent / f"{out.name}.sqlite",
         "--quiet", *extra])
    return list(csv.DictReader(open(out / "compare.csv")))


def test_permute_is_the_converters():
    # The rows of one head of 4: HF [0 1 | 2 3] (halves) -> GGUF [0 2 1 3] (pairs).
    w = np.arange(8.0).reshape(8, 1)
    assert permute(w, 2, 2).ravel().tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_compare_hf_with_its_conversion_is_exact(hf, tmp_path, dtype):
    d, tensors = hf
    g = tmp_path / f"tiny-{dtype}.gguf"
    convert(tensors, g, dtype)
    rows = compare(d, g, tmp_path / "out")
    matrices = [r for r in rows if r["head"] == ""]
    heads = [r for r in rows if r["head"] != ""]
    # every 2-D tensor of the base paired with its GGUF counterpart, heads of all four projections
    assert {r["tensor"] for r in matrices} == {n for n, x in tensors.items() if x.ndim == 2}
    assert len(heads) == LAYERS * (N_HEAD + N_KV + N_KV + N_HEAD)
    for r in rows:
        assert float(r["delta_frob_norm"]) == 0.0, (r["tensor"], r["head"])
        for f in ["avg_l_agreement", "avg_r_agreement"]:
            assert float(r[f]) == pytest.approx(1.0, abs=1e-12), (r["tensor"], r["head"], f)


def test_without_undoing_the_layout_heads_would_differ(hf, tmp_path):
    # The same file under an architecture the converter does not permute for: Q/K heads differ from HF
    # (their rows are the permuted ones), so the undo above is what makes the comparison exact.
    d, tensors = hf
    g = tmp_path / "tiny.gguf"
    convert(tensors, g, "F32")
    data = bytearray(g.read_bytes())
    i = data.find(b"llama")  # general.architecture's value; keys llama.* keep their prefix
    data[i:i + 5] = b"llamb"
    other = tmp_path / "other.gguf"
    other.write_bytes(bytes(data))
    rows = compare(d, other, tmp_path / "o", "--allow-partial")
    qk = [x for x in rows if x["role"] in ("attn_q", "attn_k")]
    assert len(qk) == 2 * LAYERS and all(float(x["delta_frob_norm"]) > 0 for x in qk)


def test_analyze_heads_of_gguf_equal_hf(hf, tmp_path):
    d, tensors = hf
    g = tmp_path / "tiny.gguf"
    convert(tensors, g, "F16")
    run(["analyze", d, g, "--out", tmp_path / "an", "--store", tmp_path / "an.sqlite", "--quiet",
         "--roles", "attn_q,attn_k"])
    rows = list(csv.DictReader(open(tmp_path / "an" / "metrics.csv")))
    by = {}
    for r in rows:
        by.setdefault((r["layer"], r["role"], r["head"]), {})[r["model"]] = r
    assert len(by) == LAYERS * (N_HEAD + N_KV + 2)
    for key, pair in by.items():
        a, b = pair.values()
        assert a["frob_norm"] == b["frob_norm"] and a["max_weights_sval"] == b["max_weights_sval"], key


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.Q4_0])
def test_what_quantisation_did_to_each_matrix_and_head(hf, tmp_path, qtype):
    d, tensors = hf
    g = tmp_path / f"tiny-{qtype.name}.gguf"
    stored = convert(tensors, g, qtype)
    rows = compare(d, g, tmp_path / "out")
    assert rows
    for r in rows:
        name = r["tensor"]
        base = tensors[name].astype(np.float64)
        data, raw = stored[name]
        q = gguf.quants.dequantize(data, raw).astype(np.float64)
        assert q.shape == base.shape
        if name.endswith(("q_proj.weight", "k_proj.weight")):  # numpy's inverse of the converter's permute
            n = N_HEAD if name.endswith("q_proj.weight") else N_KV
            q = q.reshape(n, HEAD_DIM // 2, 2, HIDDEN).swapaxes(1, 2).reshape(base.shape)
        if r["head"] != "":
            h = int(r["head"])
            if r["role"] == "attn_o":
                base, q = base[:, h * HEAD_DIM:(h + 1) * HEAD_DIM], q[:, h * HEAD_DIM:(h + 1) * HEAD_DIM]
            else:
                base, q = base[h * HEAD_DIM:(h + 1) * HEAD_DIM], q[h * HEAD_DIM:(h + 1) * HEAD_DIM]
        delta = q - base
        assert float(r["delta_frob_norm"]) == pytest.approx(np.linalg.norm(delta), rel=1e-9), (name, r["head"])
        assert 0 < float(r["rel_delta_frob_norm"]) < (0.02 if qtype == QT.Q8_0 else 0.3)


def test_bindings_read_q_k_in_hf_order(hf, tmp_path):
    diffract = pytest.importorskip("diffract_spectral")
    d, tensors = hf
    g = tmp_path / "tiny.gguf"
    convert(tensors, g, "F16")
    ck = diffract.open(g)
    for name, x in tensors.items():
        got = ck[gguf_name(name)]
        np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), x, err_msg=name)
    q = ck["blk.0.attn_q.weight"]
    assert q.dtype == np.float32  # a decoded copy in HF order, not a view of the permuted bytes
