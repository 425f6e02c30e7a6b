"""docs/watch.md's worked example: a tiny Llama-architecture model (2 layers, hidden 64, 4 query heads over
2 key/value heads) trained for 300 steps with transformers' Trainer on the project's documentation,
saving every 50 steps, with diffract's Trainer callback; then `diffract watch` over the run, compared
with the weights at the start, on the callback's store (so it computes nothing the callback did). Needs torch, transformers and accelerate.

    python examples/watch_trainer.py OUT_DIR"""
import subprocess
import sys
from pathlib import Path

import tokenizers
import torch
import transformers

from diffract_spectral.integrations.transformers import DiffractCallback

ROOT = Path(__file__).resolve().parents[1]
out = Path(sys.argv[1] if len(sys.argv) > 1 else "watch-example")
alphabet = "abcdefghijklmnopqrstuvwxyz .\n"
vocab = {"[UNK]": 0, "[PAD]": 1, **{c: i + 2 for i, c in enumerate(alphabet)}}
tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
text = "".join(p.read_text(errors="ignore").lower() for p in sorted((ROOT / "docs").glob("*.md")))[:80000]
ids = torch.tensor(tok.encode(text).ids)


class Windows(torch.utils.data.Dataset):
    def __init__(self, count=6000, length=64):
        g = torch.Generator().manual_seed(0)
        self.starts = torch.randint(0, len(ids) - length - 1, (count,), generator=g)
        self.length = length

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        x = ids[self.starts[i]:self.starts[i] + self.length]
        return {"input_ids": x, "labels": x.clone()}


config = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                  num_key_value_heads=2, num_hidden_layers=2, max_position_embeddings=128,
                                  tie_word_embeddings=False)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config)
args = transformers.TrainingArguments(output_dir=str(out / "run"), max_steps=300, save_steps=50, logging_steps=50,
                                      per_device_train_batch_size=16, learning_rate=3e-3, report_to=[], use_cpu=True,
                                      seed=0, disable_tqdm=True)
callback = DiffractCallback(min_fit_size=0)
trainer = transformers.Trainer(model=model, args=args, train_dataset=Windows(), callbacks=[callback])
callback.bind(trainer)
trainer.train()
for entry in trainer.state.log_history:
    if "diffract/step" in entry:
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in entry.items()})
# The callback's own options (its metrics, delta_only against its base) on its store: nothing to compute.
watched = out / "run" / "diffract-watch"
subprocess.run([str(ROOT / "build" / "diffract"), "watch", out / "run", "--out", out / "watch", "--base", watched / "base",
                "--min-fit-size", "0", "--metrics", "pl_alpha,stable_rank", "--delta-only", "--store",
                watched / "results.sqlite", "--settle", "0"], check=True)
