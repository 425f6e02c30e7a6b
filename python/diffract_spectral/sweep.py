"""`diffract sweep ...` from Python: a grid of edited candidates, each scored by your evaluation,
summarised as curves and areas under them (see docs/edit.md).

Each function writes what the CLI writes to `out` — curve.csv (heads_effect.csv for rewind_each),
summary.json, logs/ and the resumable journal sweep_state.jsonl — and returns a SweepResult of what
it wrote (the library returns the table and the summary; nothing is read back from the files). Keyword arguments mirror the CLI's options in snake_case: every sweep takes out,
eval, select_eval, report_eval, score_key, direction ("higher" or "lower"; default: what a known score_key implies), eval_timeout (seconds, 6 h; 0: none), keep, max_candidates (1000), max_shard_size ("5G"), threads, max_memory, store,
device, quiet, progress (True: a tqdm bar of the evaluations), roles, layers, match and exclude. An evaluation is a shell command with {model}, or a
Python callable that receives the candidate's directory (a pathlib.Path) and returns a float. Grids
(fractions, keeps, omegas) are "START:STOP:STEP" or a list of numbers. A sweep with the same options
resumes the journal, whether the CLI or Python started it. The GIL is released while sweeping (a
callable evaluation takes it while it runs).
"""
from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from . import _core, _progress
from ._keywords import refuse_unknown

if TYPE_CHECKING:  # type checkers and IDEs only: pandas stays optional
    import pandas as pd

__all__ = ["rewind", "truncate", "interpolate", "rewind_each", "validate", "SweepResult"]

Evaluation = Union[str, Callable[[os.PathLike], float], None]


@dataclass
class SweepResult:
    """The result of a sweep: `curve` (curve.csv: order, seed, x, score[, select_score, report_score],
    eval_seconds; None for rewind_each), `heads_effect` (heads_effect.csv: layer, head, score, delta,
    greedy_rank, eval_seconds; only for rewind_each), `references` (the inputs evaluated as they are:
    role, score[, select_score, report_score], eval_seconds, path; roles base and model, or a and b for
    interpolate), `summary` (summary.json as a dict) and `out` (the output directory); for validate,
    `heads_validation` (heads_validation.csv: layer, head, importance, rank, score, harm[,
    importance_second, rank_second]), `sets` (sets.csv: set, seed, query_heads, kv_blocks, parameters,
    score, harm) and `verdict` (the plain sentences it printed). Tables are pandas DataFrames, or dicts
    of lists without pandas."""
    curve: Optional[pd.DataFrame]
    summary: dict
    out: str
    heads_effect: Optional[pd.DataFrame] = None
    references: Optional[pd.DataFrame] = None
    heads_validation: Optional[pd.DataFrame] = None
    sets: Optional[pd.DataFrame] = None
    verdict: Optional[list] = None


def _references(summary: dict):
    """summary.json's references ({role: {score, ..., path}}) as a table with a row per role."""
    from . import _table

    refs = summary.get("references", {})
    order = ["score", "select_score", "report_score", "eval_seconds", "path"]  # as the CLI documents them
    present = dict.fromkeys(name for fields in refs.values() for name in fields)
    names = ["role"] + [n for n in order if n in present] + [n for n in present if n not in order]
    columns = {name: [] for name in names}
    for role, fields in refs.items():
        columns["role"].append(role)
        for name in names[1:]:
            value = fields.get(name)
            columns[name].append(value if name == "path" or value is not None else float("nan"))  # null: NaN
    return _table(columns)


def _result(run, heads_effect: bool = False) -> SweepResult:
    """The SweepResult of a sweep `_run` returned: the library's table (curve.csv's, heads_effect.csv's
    with heads_effect) and summary.json's text."""
    from . import _table

    out, r = run
    summary = json.loads(r["summary"])
    data = _table(r["table"])
    references = _references(summary)
    if heads_effect:
        return SweepResult(None, summary, out, data, references)
    return SweepResult(data, summary, out, None, references)


def _grid(values) -> str:
    """A grid option as text: "START:STOP:STEP" or a list as is, or a sequence of numbers."""
    if isinstance(values, str):
        return values
    if isinstance(values, (int, float)):
        return str(values)
    return ",".join(str(v) for v in values)


def _list_spec(values) -> str:
    """A comma-separated option (--orders, --roles) from a string or a sequence of strings."""
    return values if isinstance(values, str) else ",".join(values or ())


def _spec(model):
    """A model argument for the engine: a spec string or a Checkpoint opened from a file."""
    from . import Checkpoint

    if isinstance(model, Checkpoint):
        return model._core
    return os.fspath(model)


def _evaluation(value: Evaluation):
    """(command, callable) of an evaluation option. A callable is described in the journal's fingerprint
    by its module and qualified name, so that a sweep with the same function resumes."""
    if value is None or isinstance(value, str):
        return value or "", None
    if not callable(value):
        raise TypeError(f"an evaluation is a command string or a callable, not {type(value).__name__}")
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"python:{getattr(value, '__module__', None) or '?'}.{name}", value


def _args(out, eval: Evaluation = None, select_eval: Evaluation = None,  # noqa: A002
          report_eval: Evaluation = None, score_key: Optional[str] = None, direction: Optional[str] = None,
          eval_timeout: float = 6 * 3600, keep: bool = False, max_candidates: int = 1000,
          max_shard_size: Union[str, int] = "5G", threads: int = 0, max_memory: Optional[str] = None,
          store: Optional[str] = None, device: str = "cpu", quiet: bool = False, roles=None, layers=None,
          match: Optional[str] = None, exclude: Optional[str] = None) -> "_core.SweepArgs":
    """The options every sweep takes, as _core.SweepArgs (a wrong keyword is a TypeError naming it)."""
    from . import _set_selection

    a = _core.SweepArgs()
    a.out = os.fspath(out)
    for name, value in (("eval", eval), ("select_eval", select_eval), ("report_eval", report_eval)):
        command, fn = _evaluation(value)
        setattr(a, name, command)
        if fn is not None:  # the binding's callables default to None (the command runs)
            setattr(a, name + "_fn", fn)
    a.score_key = score_key or ""
    a.direction = direction or ""
    a.eval_timeout = float(eval_timeout)
    a.keep = bool(keep)
    a.max_candidates = int(max_candidates)
    a.max_shard_size = str(max_shard_size)
    a.threads = int(threads)
    a.max_memory = "" if max_memory is None else str(max_memory)
    a.store = "" if store is None else os.fspath(store)
    a.device = device
    a.quiet = bool(quiet)
    _set_selection(a, roles, layers, match, exclude)
    return a


def _run(core_sweep, out, options: dict, *inputs, per_head: bool = False):
    """Runs `core_sweep(*inputs, args)` with the options as _core.SweepArgs; progress=True shows the
    evaluations done as a tqdm bar (stderr lines without tqdm) instead of the engine's lines. Returns
    (out, what core_sweep returned)."""
    options = dict(options)
    allowed = [p for p in inspect.signature(_args).parameters if p != "out"] + ["progress"]
    refuse_unknown("sweep." + core_sweep.__name__.removeprefix("sweep_"), options, allowed)
    with _progress.display(options.pop("progress", False)) as report:
        a = _args(out, **options)
        a.per_head = bool(per_head)  # sweep truncate's own option
        if report is not None:  # the field defaults to None (nanobind refuses None for an object field)
            a.progress = report
        r = core_sweep(*inputs, a)
    return a.out, r


def rewind(*, base, model, out, reference=None, orders: Union[str, Sequence[str]] = "importance,random",
           seeds: int = 5, seed: int = 0, fractions: Union[str, Sequence[float]] = "0:1:0.1",
           scale_scope: str = "global", kv_policy: str = "all", **options) -> SweepResult:
    """`sweep rewind`: rewind curves — for each ordering of the heads (importance, agreement, pl_ks,
    random; random with `seeds` seeds from `seed`) and each fraction, the model with that fraction of
    heads rewound to the base, scored by `eval`. The heads are ranked by compare (models on disk,
    `reference` for the importance score). Returns the curve and the summary (AUC per ordering, and
    against the random orderings)."""
    return _result(_run(_core.sweep_rewind, out, options, _spec(base), _spec(model),
                        None if reference is None else _spec(reference), _list_spec(orders), int(seeds),
                        int(seed), scale_scope, kv_policy, _grid(fractions)))


def rewind_each(*, base, model, out, reference=None, scale_scope: str = "global", kv_policy: str = "all",
                **options) -> SweepResult:
    """`sweep rewind-each`: rewind one head at a time and score each candidate with `eval`. Returns
    heads_effect (layer, head, score, delta = score − the unedited model's, greedy_rank 0 = the head
    whose rewind raises the score most) and the summary; `curve` is None."""
    return _result(_run(_core.sweep_rewind_each, out, options, _spec(base), _spec(model),
                        None if reference is None else _spec(reference), scale_scope, kv_policy),
                   heads_effect=True)


def validate(*, base, model, out, reference=None, second_reference=None, k: Optional[int] = None, seeds: int = 5,
             seed: int = 0, direction: Optional[str] = None, scale_scope: str = "global", kv_policy: str = "all",
             **options) -> SweepResult:
    """`sweep validate`: does the head ranking predict what rewinding heads does? Every head rewound
    alone (its harm: the score lost, in `direction`: "higher" or "lower" is better; by default the one a
    known `score_key` implies, else required) against its importance (Spearman with a bootstrap
    interval and a permutation p-value); the k least and k most important heads (k: a quarter by
    default) against `seeds` random sets matched to each; with `second_reference`, the ranking's
    stability (Kendall tau-b, the heads that move). Returns heads_validation, sets, the verdict and the
    summary."""
    from . import _table

    run = _run(_core.sweep_validate, out, options, _spec(base), _spec(model),
               None if reference is None else _spec(reference),
               None if second_reference is None else _spec(second_reference), int(k or 0), int(seeds), int(seed),
               direction or "", scale_scope, kv_policy)
    result = _result(run)
    sets = result.summary.get("sets", [])
    names = list(dict.fromkeys(name for s in sets for name in s))
    result.heads_validation, result.curve = result.curve, None
    result.sets = _table({name: [s.get(name) for s in sets] for name in names})
    result.verdict = list(result.summary.get("verdict", []))
    return result


def truncate(*, base, model, out, keeps: Union[str, Sequence[float]] = "0:1:0.1", per_head: bool = False,
             **options) -> SweepResult:
    """`sweep truncate`: the truncation curve — for each fraction in `keeps`, the base plus the delta
    truncated to that fraction of its singular values (per_head: each attention head block
    separately), scored by `eval`. Returns the curve and the summary."""
    return _result(_run(_core.sweep_truncate, out, options, _spec(base), _spec(model), _grid(keeps),
                        per_head=per_head))


def interpolate(a, b, *, out, omegas: Union[str, Sequence[float]] = "0:1:0.1", **options) -> SweepResult:
    """`sweep interpolate A B`: the interpolation curve — for each ω in `omegas`, (1 − ω) A + ω B,
    scored by `eval`. Returns the curve, the references (a and b as they are) and the summary."""
    return _result(_run(_core.sweep_interpolate, out, options, _spec(a), _spec(b), _grid(omegas)))
