"""lm-evaluation-harness as a sweep evaluation: reading a metric from the results JSON that `lm_eval
--output_path DIR` writes (DIR/<model>/results_<timestamp>.json, or the file itself), and running
lm_eval on a model into a temporary directory to print that metric.

The results layout: {"results": {TASK: {"alias": ..., "METRIC,FILTER": value,
"METRIC_stderr,FILTER": value or "N/A", ...}, ...}, "n-samples": {...}, ...}.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .errors import EvalError, MissingDependency
from .hf import model_source


def results_file(path) -> Path:
    """The results JSON at `path`: the file, or the newest results*.json under the directory."""
    p = Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise EvalError(f"{path}: no such results file or directory")
    found = sorted(p.rglob("results*.json"), key=lambda f: (f.stat().st_mtime, f.name))
    if not found:
        raise EvalError(f"{path}: no results*.json under this directory (lm_eval --output_path writes one)")
    return found[-1]


def read_lm_eval_results(path) -> dict:
    """The results JSON as a dict, checked to hold a "results" mapping."""
    f = results_file(path)
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EvalError(f"{f}: not a JSON file ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise EvalError(f"{f}: no \"results\" object (expected lm-evaluation-harness output)")
    data["_file"] = str(f)
    return data


def lm_eval_score(path, task=None, metric="acc") -> dict:
    """{"task", "metric", "stderr", "score"}: `metric` of `task` in the results at `path`. `metric` is
    lm-eval's key ("acc,none", "exact_match,strict-match") or its name alone ("acc": the ",none"
    filter); `task` may be left out when the file holds one task."""
    data = read_lm_eval_results(path)
    results, source = data["results"], data["_file"]
    if task is None:
        if len(results) != 1:
            raise EvalError(f"{source}: --task: expected one of {', '.join(sorted(results))}")
        task = next(iter(results))
    if task not in results:
        raise EvalError(f"{source}: --task: no task '{task}' (found {', '.join(sorted(results)) or 'none'})")
    entry = results[task]
    key = metric if "," in metric else f"{metric},none"
    if key not in entry and metric in entry:
        key = metric  # older lm-eval versions write metrics without a filter
    value = entry.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        metrics = sorted(k for k, v in entry.items() if isinstance(v, (int, float)) and "_stderr" not in k)
        raise EvalError(f"{source}: task '{task}': no numeric metric '{key}' (found {', '.join(metrics)})")
    name, _, flt = key.partition(",")
    stderr = entry.get(f"{name}_stderr,{flt}" if flt else f"{name}_stderr")
    return {"task": task, "metric": key, "stderr": stderr if isinstance(stderr, (int, float)) else None,
            "score": float(value)}


def lm_eval_command() -> list:
    """How to run lm-evaluation-harness: its `lm_eval` script on PATH, else `python -m lm_eval`."""
    script = shutil.which("lm_eval")
    if script:
        return [script]
    try:
        import importlib.util

        if importlib.util.find_spec("lm_eval") is not None:
            return [sys.executable, "-m", "lm_eval"]
    except (ImportError, ValueError):
        pass
    raise MissingDependency("lm-eval needs lm-evaluation-harness: pip install lm-eval")


def run_lm_eval(model, tasks: str, metric="acc", task=None, device="cpu", batch_size="1", limit=None,
                num_fewshot=None, model_args="", extra=()) -> dict:
    """Runs `lm_eval --model hf --model_args pretrained=MODEL --tasks TASKS` into a temporary directory
    (its output goes to stderr) and returns lm_eval_score of the result, with the seconds it took."""
    start = time.perf_counter()
    command = lm_eval_command()
    # lm_eval's hf model takes a GGUF as gguf_file= and an adapter as peft= over its base.
    source = model_source(model) if Path(model).exists() else None  # else a hub name, passed as it is
    if source is None:
        margs = f"pretrained={model}"
    elif source.kind == "gguf":
        margs = f"pretrained={os.fspath(source.directory)},gguf_file={source.gguf_file}"
    elif source.kind == "adapter":
        margs = f"pretrained={source.base},peft={os.fspath(source.directory)}"
    else:
        margs = f"pretrained={os.fspath(source.directory)}"
    margs += f",{model_args}" if model_args else ""
    with tempfile.TemporaryDirectory(prefix="diffract-lm-eval-") as out:
        cmd = [*command, "--model", "hf", "--model_args", margs, "--tasks", tasks, "--device", device,
               "--batch_size", str(batch_size), "--output_path", out]
        if limit is not None:
            cmd += ["--limit", str(limit)]
        if num_fewshot is not None:
            cmd += ["--num_fewshot", str(num_fewshot)]
        cmd += list(extra)
        p = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
        if p.returncode != 0:
            raise EvalError(f"lm_eval failed (exit status {p.returncode}): {' '.join(cmd)}")
        if task is None and "," not in tasks:
            task = tasks
        result = lm_eval_score(out, task, metric)
    return {"seconds": time.perf_counter() - start, **result}
