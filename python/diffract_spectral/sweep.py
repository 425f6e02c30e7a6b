"""`diffract sweep ...` from Python: a grid of edited candidates, each scored by your evaluation,
summarised as curves and areas under them (see docs/edit.md).

Each function writes what the CLI writes to `out` — curve.csv (heads_effect.csv for rewind_each),
summary.json, logs/ and the resumable journal sweep_state.jsonl — and returns a SweepResult of what
it wrote (the library returns the table and the summary; nothing is read back from the files). Keyword
arguments mirror the CLI's options in snake_case, each an explicit keyword of every sweep: out, eval,
select_eval, report_eval, score_key, direction ("higher" or "lower" is better; default: what a known
score_key implies), eval_timeout (seconds, 6 h; 0: none), keep, max_candidates (1000),
max_shard_size ("5G"), threads, max_memory, store, device, quiet, progress (True: a tqdm bar of the
evaluations), roles, layers, match and exclude. An evaluation is a shell command with {model} (the
candidate's path) and {python} (this interpreter, sys.executable), or a Python callable that receives the candidate's directory (a pathlib.Path) and returns a float. Grids
(fractions, keeps, omegas) are "START:STOP:STEP" or a list of numbers. A sweep with the same options
resumes the journal, whether the CLI or Python started it. The GIL is released while sweeping (a
callable evaluation takes it while it runs).
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from . import _core, _progress
from ._keywords import keywords_checked

if TYPE_CHECKING:  # type checkers and IDEs only: pandas stays optional
    import pandas as pd

__all__ = ["rewind", "truncate", "interpolate", "rewind_each", "validate", "SweepResult"]

Evaluation = Union[str, Callable[[os.PathLike], float], None]

# The sweeps' defaults, written once in the library (sweep::SweepOptions) and read here.
_D = _core.SweepArgs()


@dataclass(repr=False)
class SweepResult:
    """The result of a sweep: `curve` (curve.csv: order, seed, x, score[, select_score, report_score],
    eval_seconds; None for rewind_each), `heads_effect` (heads_effect.csv: layer, head, score, delta,
    greedy_rank, eval_seconds; only for rewind_each), `references` (the inputs evaluated as they are:
    role, score[, select_score, report_score], eval_seconds, path; roles base and model, or a and b for
    interpolate), `summary` (summary.json as a dict) and `out` (the output directory); for validate,
    `heads_validation` (heads_validation.csv: layer, head, importance, rank, score, harm[,
    importance_second, rank_second]), `sets` (sets.csv: set, seed, query_heads, kv_blocks, parameters,
    score, harm) and `verdict` (the plain sentences it printed). With unit="experts" the per-unit tables
    are `experts_effect` and `experts_validation` (column `expert` for `head`; sets count experts and
    parameters) and the head tables are None. Tables are pandas DataFrames, or dicts of lists without
    pandas."""
    curve: Optional[pd.DataFrame]
    summary: dict
    out: str
    heads_effect: Optional[pd.DataFrame] = None
    references: Optional[pd.DataFrame] = None
    heads_validation: Optional[pd.DataFrame] = None
    sets: Optional[pd.DataFrame] = None
    verdict: Optional[list] = None
    experts_effect: Optional[pd.DataFrame] = None
    experts_validation: Optional[pd.DataFrame] = None

    def _tables(self) -> str:
        return ", ".join(n for n in ("curve", "heads_effect", "experts_effect", "references", "heads_validation",
                                     "experts_validation", "sets", "summary")
                         if getattr(self, n) is not None)

    def __repr__(self) -> str:
        """A few lines: the sweep, its output directory, rows, the references' scores, the verdict."""
        from . import _display

        return _display.text("SweepResult", _display.sweep_facts(self), self._tables())

    def _repr_html_(self) -> str:
        from . import _display

        validation = self.heads_validation if self.heads_validation is not None else self.experts_validation
        return _display.html_of("SweepResult", _display.sweep_facts(self), self._tables(), validation)


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
    if heads_effect and summary.get("unit") == "experts":
        return SweepResult(None, summary, out, None, references, experts_effect=data)
    if heads_effect:
        return SweepResult(None, summary, out, data, references)
    return SweepResult(data, summary, out, None, references)


def _grid(values, arg: str = "grid") -> str:
    """A grid option as text: "START:STOP:STEP" or a list as is, or a sequence of numbers (each a
    finite real number; `arg` names the argument in errors)."""
    if isinstance(values, str):
        return values
    if isinstance(values, bool) or values is None:
        raise TypeError(f"{arg}=: a grid is \"START:STOP:STEP\" or a list of numbers, not {values!r}")
    if isinstance(values, (int, float)):
        values = [values]
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"{arg}=: a grid is \"START:STOP:STEP\" or a list of numbers, not "
                        f"{type(values).__name__}") from None
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            raise TypeError(f"{arg}=: {v!r} is not a number")
        x = float(v)
        if not math.isfinite(x):
            raise _core.InputError(f"{arg}=: {v!r} is not a finite number")
        out.append(repr(x) if isinstance(v, float) else str(v))
    return ",".join(out)


def _list_spec(values) -> str:
    """A comma-separated option (--orders, --roles) from a string or a sequence of strings."""
    return values if isinstance(values, str) else ",".join(values or ())


def _spec(model, arg: str = "model"):
    """A model argument for the engine: a spec string or a Checkpoint opened from a file."""
    from . import Checkpoint

    if isinstance(model, Checkpoint):
        return model._core
    if isinstance(model, (bytes, bytearray)):
        raise TypeError(f"{arg}=: a path is a str or os.PathLike, not bytes")
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"{arg}=: a sweep reads models from disk: a path or id, or a Checkpoint opened from a "
                        f"file, not {type(model).__name__}")
    return os.fspath(model)


def _evaluation(value: Evaluation, arg: str = "eval"):
    """(command, callable) of an evaluation option. A callable is described in the journal's fingerprint
    by its module and qualified name, so that a sweep with the same function resumes."""
    if value is None or isinstance(value, str):
        return value or "", None
    if not callable(value):
        raise TypeError(f"{arg}=: an evaluation is a command string or a callable, not {type(value).__name__}")
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"python:{getattr(value, '__module__', None) or '?'}.{name}", value


Roles = Union[str, Sequence[str], None]
Layers = Union[str, int, Sequence[int], None]
Experts = Union[str, int, Sequence[Union[int, str]], None]  # "0-7,shared", an expert index or a list
Components = Union[str, Sequence[str], None]  # "language,vision" or a list of component names
Grid = Union[str, Sequence[float]]
PathArg = Union[str, os.PathLike]

_COMMON_DOC = """
    Options every sweep takes: out (the output directory, required), eval (a shell command with
    {model} and {python}, or a callable receiving the candidate's pathlib.Path and returning a float),
    select_eval and report_eval (pick x on one evaluation, report on another), score_key (the JSON
    field of the command's output holding the score, a dotted path), direction ("higher" or "lower" is
    better; default: what a known score_key implies, required where a sweep judges), eval_timeout (seconds per
    evaluation, 6 h; 0: none), keep (keep the candidates in out/candidates/), max_candidates (refuse
    larger sweeps, 1000), max_shard_size (a candidate's largest shard, "5G"), threads, max_memory, store,
    device, quiet (no progress lines), progress (True: a tqdm bar of the evaluations) and the selection
    roles, layers, match, exclude, experts, component. Returns a SweepResult."""


def _sweep(name: str):
    """A sweep function: unknown keywords refused as `sweep.NAME`, the common options documented."""

    def decorate(fn):
        fn.__doc__ = (fn.__doc__ or "") + _COMMON_DOC
        return keywords_checked("sweep." + name, None)(fn)

    return decorate


def _args(out: PathArg, eval: Evaluation, select_eval: Evaluation,  # noqa: A002
          report_eval: Evaluation, score_key: Optional[str], direction: Optional[str], eval_timeout: float, keep: bool,
          max_candidates: int, max_shard_size: Union[str, int], threads: int, max_memory: Optional[str],
          store: Optional[PathArg], device: str, quiet: bool, roles: Roles, layers: Layers,
          match: Optional[str], exclude: Optional[str], experts: Experts,
          component: Components) -> "_core.SweepArgs":
    """The options every sweep takes, as _core.SweepArgs."""
    from . import _checked_int, _set_selection

    a = _core.SweepArgs()
    a.out = os.fspath(out)
    for name, value in (("eval", eval), ("select_eval", select_eval), ("report_eval", report_eval)):
        command, fn = _evaluation(value, name)
        setattr(a, name, command)
        if fn is not None:  # the binding's callables default to None (the command runs)
            setattr(a, name + "_fn", fn)
    a.score_key = score_key or ""
    a.direction = direction or ""
    a.python = sys.executable or "python3"  # what {python} stands for in a command: this interpreter
    a.eval_timeout = float(eval_timeout)
    a.keep = bool(keep)
    a.max_candidates = _checked_int(max_candidates, "max_candidates")
    a.max_shard_size = str(max_shard_size)
    a.threads = _checked_int(threads, "threads", 0)
    a.max_memory = "" if max_memory is None else str(max_memory)
    a.store = "" if store is None else os.fspath(store)
    a.device = device
    a.quiet = bool(quiet)
    _set_selection(a, roles, layers, match, exclude, experts, component)
    return a


def _run(core_sweep, common: dict, *inputs, per_head: bool = False, unit: Optional[str] = None):
    """Runs `core_sweep(*inputs, args)` with the common options (`common`: the caller's locals, of which
    _args's names are taken) as _core.SweepArgs; progress=True shows the evaluations done as a tqdm bar
    (stderr lines without tqdm) instead of the engine's lines. Returns (out, what core_sweep returned)."""
    import inspect

    names = inspect.signature(_args).parameters
    with _progress.display(common["progress"]) as report:
        a = _args(**{n: common[n] for n in names})
        a.per_head = bool(per_head)  # sweep truncate's own option
        a.unit = "" if unit is None else str(unit)  # the rewind sweeps' own option
        if report is not None:  # the field defaults to None (nanobind refuses None for an object field)
            a.progress = report
        r = core_sweep(*inputs, a)
    return a.out, r


@_sweep("rewind")
def rewind(*, base: Any, model: Any, out: PathArg, reference: Any = None,
           orders: Union[str, Sequence[str]] = _D.orders, seeds: int = _D.seeds, seed: int = _D.seed,
           fractions: Grid = _D.fractions, scale_scope: str = _D.scale_scope, kv_policy: str = _D.kv_policy,
           unit: Optional[str] = None, eval: Evaluation = None, select_eval: Evaluation = None,  # noqa: A002
        report_eval: Evaluation = None, score_key: Optional[str] = None, direction: Optional[str] = None,
        eval_timeout: float = _D.eval_timeout,
        keep: bool = False, max_candidates: int = _D.max_candidates, max_shard_size: Union[str, int] = _D.max_shard_size, threads: int = 0,
        max_memory: Optional[Union[str, int]] = None, store: Optional[PathArg] = None, device: str = "cpu", quiet: bool = False,
        progress: bool = False, roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None) -> SweepResult:
    """`sweep rewind`: rewind curves — for each ordering of the heads (importance, agreement, pl_ks,
    random; random with `seeds` seeds from `seed`) and each fraction, the model with that fraction of
    heads rewound to the base, scored by `eval`. The heads are ranked by compare (models on disk,
    `reference` for the importance score). Returns the curve and the summary (AUC per ordering, and
    against the random orderings). unit="experts" (the default when `experts` is given): the units are
    a mixture of experts' routed experts, random orderings matched in experts and parameters."""
    from . import _checked_int

    return _result(_run(_core.sweep_rewind, locals(), _spec(base, "base"), _spec(model),
                        None if reference is None else _spec(reference, "reference"), _list_spec(orders),
                        _checked_int(seeds, "seeds"), _checked_int(seed, "seed", 0), scale_scope, kv_policy,
                        _grid(fractions, "fractions"), unit=unit))


@_sweep("rewind_each")
def rewind_each(*, base: Any, model: Any, out: PathArg, reference: Any = None, scale_scope: str = _D.scale_scope,
                kv_policy: str = _D.kv_policy, unit: Optional[str] = None, eval: Evaluation = None,  # noqa: A002
                select_eval: Evaluation = None,
        report_eval: Evaluation = None, score_key: Optional[str] = None, direction: Optional[str] = None,
        eval_timeout: float = _D.eval_timeout,
        keep: bool = False, max_candidates: int = _D.max_candidates, max_shard_size: Union[str, int] = _D.max_shard_size, threads: int = 0,
        max_memory: Optional[Union[str, int]] = None, store: Optional[PathArg] = None, device: str = "cpu", quiet: bool = False,
        progress: bool = False, roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None) -> SweepResult:
    """`sweep rewind-each`: rewind one head at a time and score each candidate with `eval`. Returns
    heads_effect (layer, head, score, delta = score − the unedited model's, greedy_rank 0 = the head
    whose rewind raises the score most) and the summary; `curve` is None. unit="experts": one routed
    expert at a time, returned as experts_effect (layer, expert, ...)."""
    return _result(_run(_core.sweep_rewind_each, locals(), _spec(base, "base"), _spec(model),
                        None if reference is None else _spec(reference, "reference"), scale_scope, kv_policy,
                        unit=unit),
                   heads_effect=True)


@_sweep("validate")
def validate(*, base: Any, model: Any, out: PathArg, reference: Any = None, second_reference: Any = None,
             k: Optional[int] = None, seeds: int = _D.seeds, seed: int = _D.seed,
             scale_scope: str = _D.scale_scope, kv_policy: str = _D.kv_policy, unit: Optional[str] = None,
             eval: Evaluation = None, select_eval: Evaluation = None,  # noqa: A002
        report_eval: Evaluation = None, score_key: Optional[str] = None, direction: Optional[str] = None,
        eval_timeout: float = _D.eval_timeout,
        keep: bool = False, max_candidates: int = _D.max_candidates, max_shard_size: Union[str, int] = _D.max_shard_size, threads: int = 0,
        max_memory: Optional[Union[str, int]] = None, store: Optional[PathArg] = None, device: str = "cpu", quiet: bool = False,
        progress: bool = False, roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None) -> SweepResult:
    """`sweep validate`: does the head ranking predict what rewinding heads does? Every head rewound
    alone (its harm: the score lost, in `direction`: "higher" or "lower" is better; by default the one a
    known `score_key` implies, else required) against its importance (Spearman with a bootstrap
    interval and a permutation p-value); the k least and k most important heads (k: a quarter by
    default) against `seeds` random sets matched to each; with `second_reference`, the ranking's
    stability (Kendall tau-b, the heads that move). Returns heads_validation (rank 1 = the most
    important head; rewind_order: the CSV's rank, 0 = the least important), sets, the verdict and the
    summary. unit="experts": the same with routed experts (experts_validation; random sets matched in
    experts and parameters)."""
    from . import _checked_int, _heads_table, _table

    run = _run(_core.sweep_validate, locals(), _spec(base, "base"), _spec(model),
               None if reference is None else _spec(reference, "reference"),
               None if second_reference is None else _spec(second_reference, "second_reference"),
               _checked_int(k or 0, "k", 0), _checked_int(seeds, "seeds", 0), _checked_int(seed, "seed", 0),
               direction or "", scale_scope, kv_policy, unit=unit)
    result = _result(run)
    sets = result.summary.get("sets", [])
    names = list(dict.fromkeys(name for s in sets for name in s))
    validation = _heads_table(run[1]["table"], group=(), names=("rank", "rank_second"))
    if result.summary.get("unit") == "experts":
        result.experts_validation = validation
    else:
        result.heads_validation = validation
    result.curve = None
    result.sets = _table({name: [s.get(name) for s in sets] for name in names})
    result.verdict = list(result.summary.get("verdict", []))
    return result


@_sweep("truncate")
def truncate(*, base: Any, model: Any, out: PathArg, keeps: Grid = _D.keeps, per_head: bool = False,
             eval: Evaluation = None, select_eval: Evaluation = None,  # noqa: A002
        report_eval: Evaluation = None, score_key: Optional[str] = None, direction: Optional[str] = None,
        eval_timeout: float = _D.eval_timeout,
        keep: bool = False, max_candidates: int = _D.max_candidates, max_shard_size: Union[str, int] = _D.max_shard_size, threads: int = 0,
        max_memory: Optional[Union[str, int]] = None, store: Optional[PathArg] = None, device: str = "cpu", quiet: bool = False,
        progress: bool = False, roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None) -> SweepResult:
    """`sweep truncate`: the truncation curve — for each fraction in `keeps`, the base plus the delta
    truncated to that fraction of its singular values (per_head: each attention head block
    separately), scored by `eval`. Returns the curve and the summary."""
    return _result(_run(_core.sweep_truncate, locals(), _spec(base, "base"), _spec(model), _grid(keeps, "keeps"),
                        per_head=per_head))


@_sweep("interpolate")
def interpolate(a: Any, b: Any, *, out: PathArg, omegas: Grid = _D.omegas, eval: Evaluation = None, select_eval: Evaluation = None,  # noqa: A002
        report_eval: Evaluation = None, score_key: Optional[str] = None, direction: Optional[str] = None,
        eval_timeout: float = _D.eval_timeout,
        keep: bool = False, max_candidates: int = _D.max_candidates, max_shard_size: Union[str, int] = _D.max_shard_size, threads: int = 0,
        max_memory: Optional[Union[str, int]] = None, store: Optional[PathArg] = None, device: str = "cpu", quiet: bool = False,
        progress: bool = False, roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None) -> SweepResult:
    """`sweep interpolate A B`: the interpolation curve — for each ω in `omegas`, (1 − ω) A + ω B,
    scored by `eval`. Returns the curve, the references (a and b as they are) and the summary."""
    return _result(_run(_core.sweep_interpolate, locals(), _spec(a, "a"), _spec(b, "b"), _grid(omegas, "omegas")))
