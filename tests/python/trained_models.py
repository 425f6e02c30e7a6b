"""Really trained tiny language models for the torch-only tests (test_trained_decoder.py, test_trained_moe.py):
text found on the machine as the training domains, a few hundred AdamW steps on random windows of it, and
the quantised copy of the noise floor's negative control. torch is imported by the function that needs it,
so that importing this module never requires it."""
from pathlib import Path

import numpy as np


def corpus(paths, limit=60000):
    """The lower-cased text of `paths`, concatenated in order, its first `limit` characters."""
    text = ""
    for p in paths:
        try:
            text += Path(p).read_text(encoding="utf-8", errors="ignore").lower() + "\n"
        except OSError:
            continue
        if len(text) > limit:
            break
    return text[:limit]


def train(model, tok, text, steps, seed, lr=3e-3):
    """`steps` AdamW steps of causal-LM loss on batches of 16 random 64-token windows of `text` (seeded)."""
    import torch

    torch.manual_seed(seed)
    ids = torch.tensor(tok(text)["input_ids"])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - 65, (16,))
        x = torch.stack([ids[s:s + 64] for s in starts])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model


def quantised(w):
    """int8 with one scale per 32 entries, dequantised: a uniform rounding error over every head and expert
    (the noise floor's negative control)."""
    flat = w.reshape(-1, 32)
    scale = np.abs(flat).max(axis=1, keepdims=True) / 127
    scale[scale == 0] = 1
    return (np.round(flat / scale) * scale).reshape(w.shape).astype(np.float32)
