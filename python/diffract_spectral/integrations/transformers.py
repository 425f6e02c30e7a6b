"""A Hugging Face Trainer callback that watches the run as it trains (docs/watch.md).

    from diffract_spectral.integrations.transformers import DiffractCallback
    callback = DiffractCallback()
    trainer = Trainer(model, args, ..., callbacks=[callback])
    callback.bind(trainer)          # the scalars then reach every report_to (TensorBoard, W&B, ...)
    trainer.train()

On each save, a background process (SCHED_IDLE: it runs only on otherwise idle cores; `threads`
threads, default 1) runs `diffract.watch` (metrics pl_alpha and stable_rank unless `metrics=` says) over
the run's output directory — the checkpoints seen before cost nothing, their results are in the store
— and writes per-checkpoint scalars: diffract/alpha/layer_<L> and diffract/stable_rank/layer_<L> (the
mean pl_alpha and stable rank of the layer's whole matrices) and diffract/max_head_delta (the largest
relative head update against the base), with diffract/step, the checkpoint they describe. When the
process has finished they are logged: through trainer.log once bound (so they reach log_history and
every reporting integration), else added to the next log the Trainer makes (log_history, and the
reporters listed after this callback). The base is `base`, or the weights at the start of training,
saved once under `out`/base. At the end of training the callback waits for the last analysis
(`wait_at_end` seconds at most). The watch tables are kept under `out`/tables (metrics.csv with a step
column, trends.csv, alerts.csv, ...), the store under `out`/results.sqlite.

transformers is imported by this module only: the rest of the package does not need it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Optional

from transformers import TrainerCallback


class DiffractCallback(TrainerCallback):
    # What the logged scalars need (one values-only SVD per matrix); metrics= asks for more.
    DEFAULT_METRICS = "pl_alpha,stable_rank"

    def __init__(self, trainer=None, *, out: Optional[str] = None, base: Optional[str] = None,
                 threads: int = 1, wait_at_end: float = 600, **options):
        """out: where the tables, store and base go (default: <output_dir>/diffract-watch). base: a model
        to compare with (default: the weights at the start of training). options: diffract.watch's
        (metrics, min_fit_size, heads, alpha_low, ...)."""
        self._trainer = trainer
        self._out = out
        self._base = base
        self._threads = int(threads)
        self._wait_at_end = float(wait_at_end)
        self._options = options
        self._proc: Optional[subprocess.Popen] = None
        self._pending = False  # a save happened while the process ran: run it again
        self._logged: set = set()
        self._ready: list = []  # scalars read but not yet logged (unbound: waiting for the next log)
        self._run_dir: Optional[str] = None

    def bind(self, trainer) -> "DiffractCallback":
        """Logs through `trainer.log` (log_history and every report_to) instead of the next log."""
        self._trainer = trainer
        return self

    # --- the Trainer's events -------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        self._run_dir = args.output_dir
        self._out = self._out or os.path.join(args.output_dir, "diffract-watch")
        os.makedirs(self._out, exist_ok=True)
        if self._base is None and model is not None:
            base = os.path.join(self._out, "base")
            if not os.path.exists(os.path.join(base, "config.json")):
                model.save_pretrained(base, safe_serialization=True)
            self._base = base

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self._pending = True
        self._start_if_idle()

    def on_step_end(self, args, state, control, **kwargs):
        self._collect()
        if self._trainer is not None:
            self._flush_through_trainer()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._trainer is not None or logs is None:
            return
        self._collect()
        for entry in self._ready:
            logs.update(entry)
            if state.log_history:
                state.log_history[-1].update(entry)
        self._ready.clear()

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        deadline = time.monotonic() + self._wait_at_end
        while (self._proc is not None or self._pending) and time.monotonic() < deadline:
            self._collect()
            time.sleep(0.1)
        self._collect()
        if self._trainer is not None:
            self._flush_through_trainer()
        elif self._ready and state.log_history is not None:
            for entry in self._ready:
                state.log_history.append({**entry, "step": state.global_step})
            self._ready.clear()

    # --- the background process -----------------------------------------------------------------
    def _paths(self):
        return os.path.join(self._out, "request.json"), os.path.join(self._out, "scalars.json")

    def _start_if_idle(self):
        if self._proc is not None or not self._pending or self._run_dir is None:
            return
        self._pending = False
        request, scalars = self._paths()
        options = {"out": os.path.join(self._out, "tables"), "store": os.path.join(self._out, "results.sqlite"),
                   "threads": self._threads, "settle": 0, "metrics": self.DEFAULT_METRICS, **self._options}
        if self._base is not None:
            options["base"] = os.fspath(self._base)
            options.setdefault("delta_only", True)  # the head updates are all the scalars need
        with open(request, "w") as f:
            json.dump({"run_dir": os.fspath(self._run_dir), "scalars": scalars, "options": options}, f)
        log = open(os.path.join(self._out, "worker.log"), "ab")
        self._proc = subprocess.Popen([sys.executable, "-m", "diffract_spectral.integrations._watch_worker", request],
                                      stdout=log, stderr=log)
        log.close()

    def _collect(self):
        """Reads the finished process's scalars (steps not logged yet) and starts the next if a save waits."""
        if self._proc is None or self._proc.poll() is None:
            self._start_if_idle()
            return
        self._proc = None
        _, scalars = self._paths()
        try:
            with open(scalars) as f:
                by_step = json.load(f)
        except (OSError, ValueError):
            by_step = {}
        for step in sorted(by_step, key=int):
            if step in self._logged or not by_step[step]:
                continue
            self._logged.add(step)
            self._ready.append({**by_step[step], "diffract/step": int(step)})
        self._start_if_idle()

    def _flush_through_trainer(self):
        ready, self._ready = self._ready, []
        for entry in ready:
            self._trainer.log(dict(entry))
