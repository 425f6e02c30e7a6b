#!/usr/bin/env python3
"""What the Trainer callback costs the training it watches: the same training (a Llama-architecture model,
`--layers` layers of hidden `--hidden`, on the project's documentation, saving every `--save-steps`) with
and without diffract's callback, interleaved `--reps` times, in one run. Reports the wall time from the
first to the last training step (the training itself: the callback's analyses run in a background
process at nice 19, one thread) and to the end of train() (which also waits for the last analysis).
Needs torch, transformers, accelerate. Usage: python bench/watch_callback.py [--steps 400] [--reps 2]"""
import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import tokenizers
import torch
import transformers

from diffract_spectral.integrations.transformers import DiffractCallback

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--save-steps", type=int, default=50)
ap.add_argument("--hidden", type=int, default=256)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--reps", type=int, default=2)
args = ap.parse_args()

ROOT = Path(__file__).resolve().parents[1]
alphabet = "abcdefghijklmnopqrstuvwxyz .\n"
vocab = {"[UNK]": 0, "[PAD]": 1, **{c: i + 2 for i, c in enumerate(alphabet)}}
tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
ids = torch.tensor(tok.encode("".join(p.read_text(errors="ignore").lower()
                                      for p in sorted((ROOT / "docs").glob("*.md")))[:100000]).ids)


class Windows(torch.utils.data.Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        s = (i * 7919) % (len(ids) - 65)
        x = ids[s:s + 64]
        return {"input_ids": x, "labels": x.clone()}


class StepClock(transformers.TrainerCallback):
    def on_step_begin(self, args, state, control, **kw):
        if state.global_step == 0:
            self.first = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.last = time.perf_counter()


def train(with_callback: bool):
    d = Path(tempfile.mkdtemp(prefix="watch-callback-"))
    config = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                                      num_attention_heads=8, num_key_value_heads=4, num_hidden_layers=args.layers,
                                      max_position_embeddings=128, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    targs = transformers.TrainingArguments(output_dir=str(d), max_steps=args.steps, save_steps=args.save_steps,
                                           per_device_train_batch_size=16, learning_rate=1e-3, report_to=[],
                                           use_cpu=True, seed=0, disable_tqdm=True, logging_steps=10**9)
    clock = StepClock()
    callbacks = [clock] + ([DiffractCallback(min_fit_size=0)] if with_callback else [])
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=Windows(), callbacks=callbacks)
    if with_callback:
        callbacks[1].bind(trainer)
    t0 = time.perf_counter()
    trainer.train()
    end = time.perf_counter()
    logged = sum("diffract/step" in e for e in trainer.state.log_history)
    shutil.rmtree(d)
    return clock.last - clock.first, end - t0, logged


plain, watched, plain_total, watched_total, logged = [], [], [], [], 0
for _ in range(args.reps):
    a, at, _ = train(False)
    b, bt, logged = train(True)
    plain.append(a), plain_total.append(at), watched.append(b), watched_total.append(bt)
print(json.dumps({"steps": args.steps, "save_steps": args.save_steps, "hidden": args.hidden, "layers": args.layers,
                  "torch_threads": torch.get_num_threads(),
                  "train_s_plain": [round(x, 2) for x in plain], "train_s_with_callback": [round(x, 2) for x in watched],
                  "slowdown_training": round(statistics.median(watched) / statistics.median(plain) - 1, 4),
                  "train_call_s_plain": [round(x, 2) for x in plain_total],
                  "train_call_s_with_callback": [round(x, 2) for x in watched_total],
                  "checkpoints_logged": logged}, indent=1))
