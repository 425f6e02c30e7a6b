"""Causal-LM perplexity on a text file: the text tokenized once (with the tokenizer's own special tokens,
e.g. Llama's BOS), scored in windows of the model's context length L that advance by `stride` tokens
(default L − 1). Each token is predicted once, in the first window that holds it after its first
position, from the tokens before it in that window; with the default stride every token but the first
is predicted, with stride L the first token of each window is not (as in the transformers guide).
loss = mean negative log-likelihood per predicted token (nats), perplexity = exp(loss)."""
from __future__ import annotations

import math
import time

from . import hf
from .errors import EvalError


def windows(n_tokens: int, length: int, stride: int):
    """(begin, end, first_target): the windows over n_tokens, each predicting tokens first_target..end-1
    that no earlier window predicted (a window's first token has no context in it)."""
    if stride < 1 or stride > length:
        raise EvalError(f"--stride: expected 1 .. the window length {length}, found {stride}")
    out, predicted, begin = [], 0, 0
    while predicted < n_tokens:
        end = min(begin + length, n_tokens)
        out.append((begin, end, max(predicted, begin + 1)))
        predicted = end
        begin += stride
    return out


def perplexity(model, text, *, max_tokens=None, stride=None, max_length=None, batch_size=1, device="cpu",
               dtype="float32", tokenizer=None) -> dict:
    """{"loss", "neg_loss", "tokens", "seconds", "perplexity"} of the causal LM in directory `model` on the
    text in file `text`."""
    torch, transformers = hf.require("clm-perplexity")
    source = hf.model_source(model)
    start = time.perf_counter()
    tok = hf.load_tokenizer(transformers, source, tokenizer)
    net = hf.load_model(torch, transformers.AutoModelForCausalLM, source, dtype, device, "causal-LM model")
    ids = tok(hf.read_text(text))["input_ids"]
    if max_tokens:
        ids = ids[:max_tokens]
    if len(ids) < 2:
        raise EvalError(f"{text}: fewer than 2 tokens")
    length = min(hf.context_length(net.config, max_length), len(ids))
    spans = windows(len(ids), length, stride or max(1, length - 1))
    nll, count = 0.0, 0
    window_nll, window_count = [], []  # per window: the chunks a sweep resamples (docs/evaluators.md)
    with torch.no_grad():
        for first in range(0, len(spans), max(1, batch_size)):
            batch = spans[first:first + max(1, batch_size)]
            # Windows of one length run together (only the last window can be shorter).
            for size in sorted({e - b for b, e, _ in batch}, reverse=True):
                group = [s for s in batch if s[1] - s[0] == size]
                x = torch.tensor([ids[b:e] for b, e, _ in group], device=device)
                logp = torch.log_softmax(net(input_ids=x).logits.float(), dim=-1)
                # position t predicts token t + 1
                token_logp = logp[:, :-1].gather(-1, x[:, 1:, None])[..., 0].double()
                for row, (b, _, target) in enumerate(group):
                    window_nll.append(-float(token_logp[row, target - b - 1:].sum()))
                    window_count.append(b + size - target)
                    nll += window_nll[-1]
                    count += window_count[-1]
    loss = nll / count
    return {"loss": loss, "neg_loss": -loss, "tokens": count, "seconds": time.perf_counter() - start,
            "chunks": chunk_scores(window_nll, window_count), "perplexity": math.exp(loss)}


def chunk_scores(nll, count) -> dict:
    """Per chunk (a window of the text, or a batch row): its loss, neg_loss and perplexity, the lists a
    sweep resamples for the interval over evaluation data (the same chunks for every candidate)."""
    losses = [n / c for n, c in zip(nll, count) if c > 0]
    return {"loss": losses, "neg_loss": [-x for x in losses], "perplexity": [math.exp(x) for x in losses]}
