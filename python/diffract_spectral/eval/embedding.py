"""Embedding agreement, for sentence encoders without a language-model head (all-MiniLM and kin): each
non-empty line of the text is a sentence, embedded as the attention-masked mean of the model's last
hidden states (sentence-transformers' mean pooling); the score is the mean, over sentences, of the cosine
similarity between the model's embedding and the `reference` model's. Against the unedited model of a
sweep it measures how much of that model's behaviour a candidate keeps (1 = the same embeddings)."""
from __future__ import annotations

import time

from . import hf
from .errors import EvalError


def sentence_embeddings(torch, transformers, model, sentences, max_length, batch_size, device, dtype, tokenizer):
    source = hf.model_source(model)
    tok = hf.load_tokenizer(transformers, source, tokenizer)
    # The pooler (absent from checkpoints saved with a masked-LM head) is not read.
    net = hf.load_model(torch, transformers.AutoModel, source, dtype, device, "encoder", unused=("pooler.",))
    length = hf.context_length(net.config, max_length)
    out = []
    with torch.no_grad():
        for first in range(0, len(sentences), max(1, batch_size)):
            batch = tok(sentences[first:first + max(1, batch_size)], padding=True, truncation=True,
                        max_length=length, return_tensors="pt").to(device)
            hidden = net(**batch).last_hidden_state.double()
            mask = batch["attention_mask"][..., None].double()
            out.append((hidden * mask).sum(1) / mask.sum(1))
    return torch.cat(out)


def embedding_similarity(model, text, *, reference, max_length=None, batch_size=32, device="cpu",
                         dtype="float32", tokenizer=None) -> dict:
    """{"sentences", "seconds", "min_similarity", "similarity"} of `model` against `reference`."""
    torch, transformers = hf.require("embedding-similarity")
    start = time.perf_counter()
    sentences = [line.strip() for line in hf.read_text(text).splitlines() if line.strip()]
    if not sentences:
        raise EvalError(f"{text}: no sentences (one per line)")
    args = (sentences, max_length, batch_size, device, dtype, tokenizer)
    a = sentence_embeddings(torch, transformers, model, *args)
    b = sentence_embeddings(torch, transformers, reference, *args)
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    return {"sentences": len(sentences), "seconds": time.perf_counter() - start,
            "min_similarity": float(cos.min()), "similarity": float(cos.mean())}
