"""The shipped model evaluators on tiny transformers models built from a config here (random weights, no
download), with tokenizers built offline: causal-LM perplexity and masked-LM loss against the same
quantities computed directly with torch, and `diffract sweep` over real HF model directories with
`--eval 'python -m diffract_spectral.eval ...'`, whose scores move as the edit grows.

Needs torch and transformers (not in CI): run with /opt/torchenv/bin/python -m pytest.
"""
import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from conftest import run

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from diffract_spectral.eval.clm import perplexity, windows  # noqa: E402
from diffract_spectral.eval.mlm import mask_positions, masked_loss  # noqa: E402

ALPHABET = "abcdefghijklmnopqrstuvwxyz .,"
WORDS = ["the", "model", "weights", "rewind", "head", "layer", "delta", "base", "math", "code", "spectrum",
         "of", "a", "is", "and", "to", "in", "with", "each", "value"]


def char_tokenizer():
    """A character-level tokenizer (one token per character of ALPHABET) as transformers saves it."""
    vocab = {"[UNK]": 0, "[PAD]": 1, **{c: i + 2 for i, c in enumerate(ALPHABET)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def gpt2(tmp_path, name, seed):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=len(ALPHABET) + 2, n_positions=48, n_embd=32, n_layer=2, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval()
    out = tmp_path / name
    model.save_pretrained(out)
    char_tokenizer().save_pretrained(out)
    return out, model


def bert(tmp_path, name, seed):
    torch.manual_seed(seed)
    out = tmp_path / name
    out.mkdir()
    (out / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tok = transformers.BertTokenizerFast(vocab_file=str(out / "vocab.txt"))
    config = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    model = transformers.BertForMaskedLM(config).eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out, model, tok


def text_file(tmp_path, chars=None, words=None, seed=0):
    rng = np.random.default_rng(seed)
    path = tmp_path / f"text{seed}.txt"
    if words:
        path.write_text(" ".join(rng.choice(WORDS, words)))
    else:
        path.write_text("".join(rng.choice(list(ALPHABET), chars)))
    return path


def direct_perplexity(model, ids):
    with torch.no_grad():
        return math.exp(model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item())


def test_windows_predict_every_token_once():
    for n, length, stride in ((10, 4, 3), (100, 16, 15), (100, 16, 5), (7, 16, 15), (33, 8, 1)):
        targets = [t for b, e, first in windows(n, length, stride) for t in range(first, e)]
        assert targets == list(range(1, n)), (n, length, stride)
        assert all(e - b <= length and first > b for b, e, first in windows(n, length, stride))
    # stride = the window length: each window's first token has no context and is not predicted
    targets = [t for b, e, first in windows(12, 4, 4) for t in range(first, e)]
    assert targets == [1, 2, 3, 5, 6, 7, 9, 10, 11]


def test_clm_perplexity_equals_torch(tmp_path):
    path, model = gpt2(tmp_path, "a", 0)
    text = text_file(tmp_path, chars=40)
    ids = char_tokenizer()(text.read_text())["input_ids"]
    r = perplexity(path, text)  # one window: exactly transformers' own loss
    assert r["tokens"] == len(ids) - 1
    assert r["perplexity"] == pytest.approx(direct_perplexity(model, ids), rel=1e-6)
    assert r["loss"] == pytest.approx(math.log(r["perplexity"]), rel=1e-12) and r["neg_loss"] == -r["loss"]

    # Many windows (the context is 48 tokens): each window's loss from transformers, with the tokens an
    # earlier window predicted left out of its labels; batching changes nothing.
    text = text_file(tmp_path, chars=300, seed=1)
    ids = char_tokenizer()(text.read_text())["input_ids"]
    nll, count = 0.0, 0
    with torch.no_grad():
        for b, e, first in windows(len(ids), 48, 20):
            labels = torch.tensor([[-100 if i < first else t for i, t in enumerate(ids[b:e], b)]])
            n = e - first
            nll += model(torch.tensor([ids[b:e]]), labels=labels).loss.item() * n
            count += n
    r1 = perplexity(path, text, stride=20)
    r4 = perplexity(path, text, stride=20, batch_size=4)
    assert r1["tokens"] == count == len(ids) - 1
    assert r1["perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-6)
    assert r4["perplexity"] == pytest.approx(r1["perplexity"], rel=1e-6)
    assert perplexity(path, text, max_tokens=100)["tokens"] == 99


def test_clm_perplexity_command_and_tokenizer_rules(tmp_path):
    path, model = gpt2(tmp_path, "a", 0)
    text = text_file(tmp_path, chars=40)
    p = subprocess.run([sys.executable, "-m", "diffract_spectral.eval", "clm-perplexity", path, "--text", text],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    line = p.stdout.strip().splitlines()[-1]
    result = json.loads(line)
    assert set(result) == {"loss", "neg_loss", "tokens", "seconds", "chunks", "perplexity"}
    # One chunk per window: their losses weighted by tokens are the loss.
    chunks = result["chunks"]
    assert set(chunks) == {"loss", "neg_loss", "perplexity"} and len(chunks["loss"]) >= 1
    assert chunks["perplexity"] == pytest.approx([math.exp(x) for x in chunks["loss"]], rel=1e-12)
    assert min(chunks["loss"]) <= result["loss"] <= max(chunks["loss"])
    assert float(line.rstrip("}").split()[-1]) == result["perplexity"]  # the last-number rule reads it
    # A weights file stands for its directory (a reference point given as model.safetensors).
    assert perplexity(path / "model.safetensors", text)["perplexity"] == result["perplexity"]
    # No tokenizer files: refused, unless --tokenizer names one.
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        (bare / f).write_bytes((path / f).read_bytes())
    p = subprocess.run([sys.executable, "-m", "diffract_spectral.eval", "clm-perplexity", bare, "--text", text],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0
    assert "no tokenizer files" in p.stderr and "--tokenizer" in p.stderr
    assert perplexity(bare, text, tokenizer=path)["perplexity"] == pytest.approx(result["perplexity"], rel=1e-12)


def test_interpolation_sweep_with_the_shipped_perplexity(tmp_path):
    a, model_a = gpt2(tmp_path, "a", 0)
    b, model_b = gpt2(tmp_path, "b", 1)
    text = text_file(tmp_path, chars=40)
    ids = char_tokenizer()(text.read_text())["input_ids"]
    out = tmp_path / "sweep"
    run(["sweep", "interpolate", a, b, "--omegas", "0:1:0.25", "--out", out, "--score-key", "perplexity",
         "--eval", f"{sys.executable} -m diffract_spectral.eval clm-perplexity {{model}} --text {text}"])
    rows = [r.split(",") for r in (out / "curve.csv").read_text().splitlines()[1:]]
    scores = [float(r[3]) for r in rows]
    assert scores[0] == pytest.approx(direct_perplexity(model_a, ids), rel=1e-6)
    assert scores[-1] == pytest.approx(direct_perplexity(model_b, ids), rel=1e-6)
    assert len(set(scores)) == 5  # each ω scores differently
    refs = json.loads((out / "summary.json").read_text())["references"]
    assert refs["a"]["score"] == pytest.approx(scores[0], rel=1e-9)
    assert refs["b"]["score"] == pytest.approx(scores[-1], rel=1e-9)
    assert all(float(r[4]) > 0 for r in rows)
    log = (out / "logs" / "omega_0.5.log").read_text()
    assert '"perplexity": ' in log


def direct_mlm_loss(model, tok, text, mask_prob, seed):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    masked = mask_positions(len(ids), mask_prob, seed)
    assert masked.sum() == (np.random.default_rng(seed).random(len(ids)) < mask_prob).sum()
    x = [tok.cls_token_id] + [tok.mask_token_id if m else t for t, m in zip(ids, masked)] + [tok.sep_token_id]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([x])).logits[0], -1)
    return -float(np.mean([logp[i + 1, t].item() for i, (t, m) in enumerate(zip(ids, masked)) if m]))


def test_mlm_loss_equals_torch_and_is_seeded(tmp_path):
    path, model, tok = bert(tmp_path, "bert", 0)
    text = text_file(tmp_path, words=40)
    r = masked_loss(path, text, mask_prob=0.15, seed=3)
    assert r["loss"] == pytest.approx(direct_mlm_loss(model, tok, text.read_text(), 0.15, 3), rel=1e-6)
    assert r["tokens"] == 40 and r["masked"] == mask_positions(40, 0.15, 3).sum()
    assert masked_loss(path, text, mask_prob=0.15, seed=3)["loss"] == r["loss"]  # the same masks
    assert masked_loss(path, text, mask_prob=0.15, seed=4)["loss"] != r["loss"]
    # Longer than the model: chunks of 62 words between [CLS] and [SEP], the masks drawn once over the text.
    long = text_file(tmp_path, words=150, seed=2)
    r = masked_loss(path, long, mask_prob=0.3, seed=0, batch_size=2)
    assert r["tokens"] == 150 and r["masked"] == mask_positions(150, 0.3, 0).sum()
    assert r["loss"] == pytest.approx(masked_loss(path, long, mask_prob=0.3, seed=0, batch_size=1)["loss"], rel=1e-6)


def test_truncation_sweep_of_a_bert_with_the_shipped_mlm_loss(tmp_path):
    base, _, tok = bert(tmp_path, "base", 0)
    model_dir, model, _ = bert(tmp_path, "cpt", 1)
    text = text_file(tmp_path, words=40)
    out = tmp_path / "sweep"
    run(["sweep", "truncate", "--base", base, "--model", model_dir, "--keeps", "0,0.5,1", "--out", out,
         "--eval", f"{sys.executable} -m diffract_spectral.eval mlm-loss {{model}} --text {text} --seed 0", "--quiet"])
    scores = [float(r.split(",")[3]) for r in (out / "curve.csv").read_text().splitlines()[1:]]
    s = json.loads((out / "summary.json").read_text())
    model_loss = direct_mlm_loss(model, tok, text.read_text(), 0.15, 0)
    assert s["references"]["model"]["score"] == pytest.approx(model_loss, rel=1e-6)
    assert scores[2] == pytest.approx(model_loss, rel=1e-4)  # the whole delta, rebuilt from its SVD in f32
    assert len(set(scores)) == 3 and s["baseline"] == s["references"]["model"]["score"]


def test_rewind_sweep_of_a_bert_with_the_shipped_embedding_similarity(tmp_path):
    from diffract_spectral.eval.embedding import embedding_similarity

    base, _, _ = bert(tmp_path, "base", 0)
    cpt, _, _ = bert(tmp_path, "cpt", 1)
    sentences = tmp_path / "sentences.txt"
    rng = np.random.default_rng(5)
    sentences.write_text("\n".join(" ".join(rng.choice(WORDS, 8)) for _ in range(12)) + "\n")
    same = embedding_similarity(cpt, sentences, reference=cpt)
    assert same["sentences"] == 12 and same["similarity"] == pytest.approx(1.0, abs=1e-12)
    # Checked against torch directly: mean-pooled last hidden states of the encoder, cosine per sentence.
    tok = transformers.AutoTokenizer.from_pretrained(cpt)
    enc = [transformers.BertModel.from_pretrained(d, add_pooling_layer=False).eval() for d in (base, cpt)]
    lines = sentences.read_text().splitlines()
    with torch.no_grad():
        x = tok(lines, padding=True, return_tensors="pt")
        m = x["attention_mask"][..., None].double()
        e = [(net(**x).last_hidden_state.double() * m).sum(1) / m.sum(1) for net in enc]
    expected = float(torch.nn.functional.cosine_similarity(e[0], e[1], dim=-1).mean())
    assert embedding_similarity(base, sentences, reference=cpt)["similarity"] == pytest.approx(expected, rel=1e-6)

    out = tmp_path / "sweep"
    run(["sweep", "rewind", "--base", base, "--model", cpt, "--orders", "importance", "--fractions", "0,0.5,1",
         "--store", tmp_path / "s.sqlite", "--out", out, "--quiet", "--eval",
         f"{sys.executable} -m diffract_spectral.eval embedding-similarity {{model}} --text {sentences} --reference {cpt}"])
    scores = [float(r["score"]) for r in csv.DictReader(open(out / "curve.csv"))]
    assert scores[0] == pytest.approx(1.0, abs=1e-9)  # nothing rewound: the model itself
    assert scores[1] < 1 and scores[2] < scores[0] and len(set(scores)) == 3
    refs = json.loads((out / "summary.json").read_text())["references"]
    assert refs["model"]["score"] == pytest.approx(1.0, abs=1e-12)
    assert refs["base"]["score"] == pytest.approx(expected, rel=1e-6)
