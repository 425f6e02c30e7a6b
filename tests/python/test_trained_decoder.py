"""Issue 34 on a really trained decoder (torch and transformers; skipped without them, as in CI): a
Llama-architecture model with GQA (4 query heads over 2 key/value heads) pre-trained for a few CPU
seconds on prose (the project's documentation), continued on Python code (the project's sources), and,
as the second reference domain, continued on other prose (Debian's licence texts). With the shipped
causal-LM perplexity as an in-process evaluation:
- `sweep rewind`: random orderings rewind exactly the query heads, K/V blocks and weight the importance
  ordering rewinds, at every x;
- `sweep validate`: each head's harm is the perplexity change of rewinding it alone, measured here
  directly for one head; the stability check compares the two references' rankings;
- the noise floor: a quantised copy of the base (int8, one scale per 32 entries) has no head that
  stands out, while one head given a large planted update does.
"""
import csv
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
st = pytest.importorskip("safetensors.numpy")
import diffract_spectral as diffract  # noqa: E402
from diffract_spectral.eval.clm import perplexity  # noqa: E402
from test_eval_models import char_tokenizer  # noqa: E402
from trained_models import corpus, quantised, train  # noqa: E402

ALPHABET_SIZE = 31  # test_eval_models.ALPHABET (29 characters) + [UNK] and [PAD]


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    d = tmp_path_factory.mktemp("decoder")
    tok = char_tokenizer()
    prose = corpus(sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"])
    code = corpus(sorted((ROOT / "python" / "diffract_spectral").rglob("*.py")) +
                  sorted((ROOT / "tests" / "python").glob("test_*.py")))
    other = corpus(sorted(Path("/usr/share/common-licenses").glob("*"))) or corpus([ROOT / "LICENSE"])
    config = transformers.LlamaConfig(vocab_size=ALPHABET_SIZE, hidden_size=64, intermediate_size=128,
                                      num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                                      max_position_embeddings=128, tie_word_embeddings=False)
    torch.manual_seed(0)
    base = train(transformers.LlamaForCausalLM(config), tok, prose, 300, 1)
    paths = {}

    def save(model, name):
        model.save_pretrained(d / name)
        tok.save_pretrained(d / name)
        paths[name] = d / name

    save(base, "base")
    for name, text in (("code", code), ("other", other)):
        m = transformers.LlamaForCausalLM(config)
        m.load_state_dict(base.state_dict())
        save(train(m, tok, text, 150, 2), name)
    held_out = d / "code.txt"
    held_out.write_text(code[-6000:])
    return {**paths, "text": held_out, "dir": d}


def test_random_orderings_rewind_what_importance_rewinds(decoder, tmp_path):
    res = diffract.sweep.rewind(base=decoder["base"], model=decoder["code"], reference=decoder["other"],
                                fractions="0:1:0.25", seeds=3, out=tmp_path / "rw", store=tmp_path / "s.sqlite",
                                eval=lambda p: -perplexity(p, decoder["text"])["perplexity"], quiet=True)
    curve = res.curve
    for x, rows in curve.groupby("x"):
        amounts = {tuple(r) for r in rows[["query_heads", "kv_blocks", "parameters"]].itertuples(index=False)}
        assert len(amounts) == 1, (x, amounts)
    assert set(curve["order"]) == {"importance", "random"}
    assert curve[curve["x"] == 0.5]["kv_blocks"].iloc[0] >= 0


def test_validate_on_a_trained_decoder(decoder, tmp_path):
    res = diffract.sweep.validate(base=decoder["base"], model=decoder["code"], reference=decoder["other"],
                                  second_reference=decoder["base"], seeds=2, direction="lower",
                                  out=tmp_path / "v", store=tmp_path / "s.sqlite",
                                  eval=lambda p: perplexity(p, decoder["text"])["perplexity"], quiet=True)
    hv = res.heads_validation
    assert len(hv) == 8 and len(res.verdict) == 4
    assert -1 <= res.summary["predictive"]["spearman"] <= 1
    # One head's harm, measured directly: rewind it alone and score the result.
    layer, head = int(hv["layer"].iloc[3]), int(hv["head"].iloc[3])
    (tmp_path / "h.csv").write_text(f"layer,head\n{layer},{head}\n")
    diffract.edit.rewind(base=decoder["base"], model=decoder["code"], heads=tmp_path / "h.csv", out=tmp_path / "one")
    unedited = perplexity(decoder["code"], decoder["text"])["perplexity"]
    rewound = perplexity(tmp_path / "one", decoder["text"])["perplexity"]
    assert hv["harm"].iloc[3] == pytest.approx(rewound - unedited, rel=1e-9, abs=1e-9)
    # The sets rewind as much weight as their matched random sets.
    sets = res.sets
    for kind in ("bottom", "top"):
        want = sets[sets["set"] == kind]["parameters"].iloc[0]
        assert (sets[sets["set"] == "random_" + kind]["parameters"] == want).all()


def test_noise_floor_on_a_trained_decoder(decoder, tmp_path):
    base = st.load_file(str(decoder["base"] / "model.safetensors"))
    q = {k: quantised(v) if v.ndim == 2 else v for k, v in base.items()}
    planted = dict(base)
    name = "model.layers.1.self_attn.q_proj.weight"
    planted[name] = base[name].copy()
    rng = np.random.default_rng(0)
    planted[name][16:32] += 0.5 * rng.standard_normal((16, 64)).astype(np.float32)  # head 1 of 4 (head_dim 16)
    # Every other head moves a little, as training would.
    for k, v in planted.items():
        if v.ndim == 2 and k != name:
            planted[k] = v + 1e-3 * rng.standard_normal(v.shape).astype(np.float32)
    for label, tensors in (("q8", q), ("planted", planted)):
        out = tmp_path / label
        out.mkdir()
        st.save_file(tensors, str(out / "model.safetensors"))
        (out / "config.json").write_text((decoder["base"] / "config.json").read_text())
    p = run(["compare", "--base", decoder["base"], tmp_path / "q8", tmp_path / "planted", "--out", tmp_path / "c",
             "--store", tmp_path / "s.sqlite"])
    heads = list(csv.DictReader(open(tmp_path / "c" / "heads.csv")))
    q8 = [h for h in heads if h["model"] == "q8"]
    assert not any(h["stands_out"] == "1" for h in q8) and "q8: no head's update stands out" in p.stderr
    out = {(int(h["layer"]), int(h["head"])) for h in heads if h["model"] == "planted" and h["stands_out"] == "1"}
    assert out == {(1, 1)}
