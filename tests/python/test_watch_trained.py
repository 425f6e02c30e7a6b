"""Issue 35 on a real training run (torch and transformers; skipped without them, as in CI): a tiny
Llama-architecture model trained with transformers' Trainer on the project's documentation, saving a
checkpoint every 50 steps, with the diffract Trainer callback attached. The callback's scalars reach the
trainer's log history (bound: through trainer.log), `diffract watch` over the output directory gives, per
checkpoint, the rows analyze gives for it, and a second watch computes nothing."""
import csv
import math

import pytest

from conftest import ROOT, run

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from test_eval_models import char_tokenizer  # noqa: E402
from diffract_spectral.integrations.transformers import DiffractCallback  # noqa: E402

SAVE_STEPS, MAX_STEPS = 50, 200


class Windows(torch.utils.data.Dataset):
    def __init__(self, ids, length=64, count=4000, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids, self.length = ids, length
        self.starts = torch.randint(0, len(ids) - length - 1, (count,), generator=g)

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        x = self.ids[self.starts[i]:self.starts[i] + self.length]
        return {"input_ids": x, "labels": x.clone()}


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def train(d, bind, max_steps=MAX_STEPS):
    tok = char_tokenizer()
    text = "".join(p.read_text(errors="ignore").lower() for p in sorted((ROOT / "docs").glob("*.md")))[:80000]
    ids = torch.tensor(tok(text)["input_ids"])
    config = transformers.LlamaConfig(vocab_size=31, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=2, max_position_embeddings=128,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    args = transformers.TrainingArguments(output_dir=str(d / "run"), max_steps=max_steps, save_steps=SAVE_STEPS,
                                          per_device_train_batch_size=16, learning_rate=3e-3, logging_steps=10,
                                          report_to=[], use_cpu=True, seed=0, disable_tqdm=True)
    callback = DiffractCallback(min_fit_size=0, wait_at_end=300)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Windows(ids), callbacks=[callback])
    if bind:
        callback.bind(trainer)
    trainer.train()
    return d / "run", trainer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train(tmp_path_factory.mktemp("trainer"), bind=True)


def test_unbound_the_scalars_join_the_trainers_next_logs(tmp_path):
    _, trainer = train(tmp_path, bind=False, max_steps=100)
    steps = [e["diffract/step"] for e in trainer.state.log_history if "diffract/step" in e]
    assert steps == [50, 100]


def test_the_callbacks_scalars_reach_the_log_history(trained):
    run_dir, trainer = trained
    logged = [e for e in trainer.state.log_history if "diffract/step" in e]
    assert logged, trainer.state.log_history[-5:]
    steps = [e["diffract/step"] for e in logged]
    assert steps == sorted(set(steps)) and set(steps) <= set(range(SAVE_STEPS, MAX_STEPS + 1, SAVE_STEPS))
    assert MAX_STEPS in steps  # the last save, waited for at the end of training
    for e in logged:
        assert {"diffract/stable_rank/layer_0", "diffract/stable_rank/layer_1", "diffract/max_head_delta"} <= set(e)
        assert all(math.isfinite(v) for k, v in e.items() if k.startswith("diffract/"))
    # The scalars are the tables': the mean stable rank of layer 0's whole matrices at that step.
    metrics = rows(run_dir / "diffract-watch" / "tables" / "metrics.csv")
    last = logged[-1]
    vals = [float(r["stable_rank"]) for r in metrics
            if r["step"] == str(last["diffract/step"]) and r["layer"] == "0" and r["head"] == ""]
    assert last["diffract/stable_rank/layer_0"] == pytest.approx(sum(vals) / len(vals), rel=1e-12)
    assert last["diffract/max_head_delta"] > 0  # trained away from the weights at the start


def test_watch_rows_equal_analyze_of_each_checkpoint(trained, tmp_path):
    run_dir, _ = trained
    out, store = tmp_path / "w", tmp_path / "s.sqlite"
    first = run(["watch", run_dir, "--out", out, "--store", store, "--min-fit-size", "0", "--settle", "0"])
    metrics = rows(out / "metrics.csv")
    steps = sorted({int(r["step"]) for r in metrics})
    assert steps == list(range(SAVE_STEPS, MAX_STEPS + 1, SAVE_STEPS))
    for step in steps:
        a = tmp_path / f"a{step}"
        run(["analyze", run_dir / f"checkpoint-{step}", "--out", a, "--min-fit-size", "0",
             "--store", tmp_path / "other.sqlite"])
        mine = [{k: v for k, v in r.items() if k != "step"} for r in metrics if r["step"] == str(step)]
        assert mine == rows(a / "metrics.csv"), step
    assert "nothing computed" not in first.stderr
    second = run(["watch", run_dir, "--out", out, "--store", store, "--min-fit-size", "0", "--settle", "0"])
    assert second.stderr.count("nothing computed") == len(steps)
