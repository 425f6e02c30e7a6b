"""Masked-LM loss on a text file, for encoders (BERT and kin): the text tokenized once (no special
tokens) and cut into chunks that fit the model between its [CLS] and [SEP] tokens; each content token is masked
with probability mask_prob by a generator seeded with `seed` (numpy's default_rng), independently of the
model, so every candidate of a sweep is scored on the same masked positions. Masked tokens are all
replaced by the mask token (not BERT training's 80/10/10), so the loss is deterministic. loss = mean
negative log-likelihood of the original token at the masked positions (nats)."""
from __future__ import annotations

import math
import time

import numpy as np

from . import hf
from .clm import chunk_scores
from .errors import EvalError


def mask_positions(n_tokens: int, mask_prob: float, seed: int) -> np.ndarray:
    """Which of n_tokens content tokens are masked (at least one)."""
    if not 0 < mask_prob < 1:
        raise EvalError(f"--mask-prob: expected a probability in (0, 1), found {mask_prob}")
    draws = np.random.default_rng(seed).random(n_tokens)
    masked = draws < mask_prob
    if not masked.any():
        masked[int(np.argmin(draws))] = True
    return masked


def masked_loss(model, text, *, mask_prob=0.15, seed=0, max_tokens=None, max_length=None, batch_size=8,
                device="cpu", dtype="float32", tokenizer=None) -> dict:
    """{"masked", "tokens", "seconds", "neg_loss", "perplexity", "loss"} of the masked LM in directory
    `model` on the text in file `text`."""
    torch, transformers = hf.require("mlm-loss")
    source = hf.model_source(model)
    start = time.perf_counter()
    tok = hf.load_tokenizer(transformers, source, tokenizer)
    if tok.mask_token_id is None:
        raise EvalError(f"{source}: the tokenizer has no mask token (mlm-loss is for masked LMs)")
    net = hf.load_model(torch, transformers.AutoModelForMaskedLM, source, dtype, device, "masked-LM model")
    ids = tok(hf.read_text(text), add_special_tokens=False)["input_ids"]
    if max_tokens:
        ids = ids[:max_tokens]
    masked = mask_positions(len(ids), mask_prob, seed)
    # [CLS] chunk [SEP] (RoBERTa's <s> … </s> are its cls and sep tokens); none when the tokenizer has none.
    head = [tok.cls_token_id] if tok.cls_token_id is not None else []
    tail = [tok.sep_token_id] if tok.sep_token_id is not None else []
    extra = len(head) + len(tail)
    chunk = hf.context_length(net.config, max_length) - extra
    if chunk < 1:
        raise EvalError(f"--max-length: leaves no room for text after {extra} special tokens")
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    rows = []  # (input ids, labels with -100 where not masked)
    for b in range(0, len(ids), chunk):
        piece, piece_mask = ids[b:b + chunk], masked[b:b + chunk]
        if not piece_mask.any():
            continue
        inputs = head + [tok.mask_token_id if m else t for t, m in zip(piece, piece_mask)] + tail
        labels = [-100] * len(head) + [t if m else -100 for t, m in zip(piece, piece_mask)] + [-100] * len(tail)
        rows.append((inputs, labels))
    nll, count = 0.0, 0
    row_nll, row_count = [], []  # per chunk of the text: what a sweep resamples
    with torch.no_grad():
        for first in range(0, len(rows), max(1, batch_size)):
            batch = rows[first:first + max(1, batch_size)]
            width = max(len(r[0]) for r in batch)
            x = torch.tensor([r[0] + [pad] * (width - len(r[0])) for r in batch], device=device)
            y = torch.tensor([r[1] + [-100] * (width - len(r[1])) for r in batch], device=device)
            attention = torch.tensor([[1] * len(r[0]) + [0] * (width - len(r[0])) for r in batch], device=device)
            logp = torch.log_softmax(net(input_ids=x, attention_mask=attention).logits.float(), dim=-1)
            sel = y != -100
            token_logp = logp.gather(-1, y.clamp(min=0)[..., None])[..., 0].double() * sel
            row_nll.extend((-token_logp.sum(dim=1)).tolist())
            row_count.extend(sel.sum(dim=1).tolist())
            nll -= float(token_logp.sum())
            count += int(sel.sum())
    loss = nll / count
    return {"masked": count, "tokens": len(ids), "seconds": time.perf_counter() - start, "neg_loss": -loss,
            "perplexity": math.exp(loss), "chunks": chunk_scores(row_nll, row_count), "loss": loss}
