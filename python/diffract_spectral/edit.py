"""`diffract edit ...` from Python: each function writes an edited HF model directory `out` (which must
not exist) and returns {"edited": n, "copied": n, "changed": n} ("changed": the edited tensors whose bytes
differ from the input's; rewind adds "heads": [(layer, head), ...]).

Arguments follow the CLI: the positionals of `edit interpolate A B` are positional, every option is a
keyword of the same name (--out DIR is out=DIR, --omega W omega=W). Models are spec strings,
Checkpoints, dicts of arrays (in memory) or model objects. Every edit also takes, as explicit keywords,
max_shard_size ("5G"), roles, layers, match, exclude, experts, component, device, progress (True: a tqdm bar over the
tensors written) and allow_nonfinite (--allow-nonfinite: edit tensors holding NaN/Inf, keeping those
entries unchanged; by default such a tensor is refused with InputError), and the SVD edits (truncate,
transplant, permute) take per_head. The GIL is released while writing.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Optional, Sequence, Union

from . import _core, _progress
from ._keywords import keywords_checked

__all__ = ["rewind", "truncate", "transplant", "permute", "interpolate", "merge", "merge_lora"]

# The edits whose CLI command takes --per-head (the SVD edits); the others refuse per_head as it does.
_PER_HEAD_EDITS = ("truncate", "transplant", "permute")

Roles = Union[str, Sequence[str], None]
Layers = Union[str, int, Sequence[int], None]
Experts = Union[str, int, Sequence[Union[int, str]], None]  # "0-7,shared", an expert index or a list
Components = Union[str, Sequence[str], None]  # "language,vision" or a list of component names

_COMMON_DOC = """
    Options every edit takes: progress (True: a tqdm bar over the tensors written), max_shard_size
    (largest safetensors shard, "5G"), device ("cpu" or "cuda" for the SVD edits), the selection — roles
    ("attn_q,mlp_down" or a list), layers ("0-3,7" or a list of ints), match and exclude (regular
    expressions over tensor names) — and allow_nonfinite (edit tensors holding NaN/Inf, keeping those
    entries; by default such a tensor raises InputError). Returns {"edited": n, "copied": n,
    "changed": n}."""


def _why(name: str) -> str:
    """Why a streaming edit has no store, threads or memory budget (the CLI says the same)."""
    if name in ("store", "threads", "max_memory"):
        return " (streaming edits read one tensor at a time: no store, threads or memory budget)"
    return ""


def _edit(name: str):
    """An edit function: unknown keywords refused under its name, the common options documented."""

    def decorate(fn):
        fn.__doc__ = (fn.__doc__ or "") + _COMMON_DOC
        return keywords_checked(name, _why)(fn)

    return decorate


def _model(m, arg: str = "model"):
    """A model argument for the engine (spec string or opened checkpoint); `arg` names it in errors."""
    from . import _model_arg

    return _model_arg(m, arg)


@contextlib.contextmanager
def _common(progress: bool, max_shard_size: Union[str, int], per_head: bool, device: str, roles: Roles,
            layers: Layers, match: Optional[str], exclude: Optional[str], experts: Experts,
            component: Components, allow_nonfinite: bool) -> Iterator["_core.EditArgs"]:
    """The options every edit takes, as _core.EditArgs, for the duration of the edit (progress=True: its
    bar, closed on the way out)."""
    from . import _set_selection

    with _progress.display(progress) as report:
        c = _core.EditArgs()
        if report is not None:  # the field defaults to None
            c.progress = report
        c.max_shard_size = str(max_shard_size)
        c.per_head = bool(per_head)
        c.allow_nonfinite = bool(allow_nonfinite)
        c.device = device
        _set_selection(c, roles, layers, match, exclude, experts, component)
        yield c


def _whole(value, what: str) -> int:
    """An integer layer or head index of heads=, refused by name when it is not a whole number >= 0."""
    if isinstance(value, bool) or value is None or type(value).__name__ == "NAType":
        raise _core.InputError(f"heads=: {what} {value!r} is not a layer/head index")
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"heads=: {what} {value!r} is not a layer/head index (an integer)") from None
    if as_float != as_float or not as_float.is_integer() or as_float < 0:
        raise _core.InputError(f"heads=: {what} {value!r} is not a layer/head index (a whole number >= 0)")
    return int(as_float)


def _heads_arg(heads):
    """heads= as the engine takes it: a CSV path as is, else a list of (layer, head). Accepts compare's
    heads table (a DataFrame, or a dict of lists, with `layer` and `head` columns) or any subset of its
    rows, rows as mappings or objects with .layer/.head (df.itertuples()), and (layer, head) pairs."""
    if heads is None:
        return None
    if isinstance(heads, (str, os.PathLike)):
        return os.fspath(heads)
    if isinstance(heads, (bytes, bytearray)):
        raise TypeError("heads=: a heads file is a str or os.PathLike path, not bytes")
    columns = getattr(heads, "columns", None)
    if columns is not None or isinstance(heads, dict):  # a table: DataFrame or dict of lists
        names = list(columns) if columns is not None else list(heads)
        if "layer" not in names or "head" not in names:
            raise _core.InputError(f"heads=: a table of heads needs `layer` and `head` columns (found "
                             f"{', '.join(map(str, names)) or 'none'})")
        if "model" in names:
            models = list(dict.fromkeys(list(heads["model"])))
            if len(models) > 1:
                raise _core.InputError(f"heads=: the rows are of {len(models)} models ({', '.join(map(str, models))}): "
                                 f"keep one model's rows (e.g. heads[heads.model == 'NAME'])")
        pairs = list(zip(list(heads["layer"]), list(heads["head"])))
    elif hasattr(heads, "index") and hasattr(heads, "get") and "layer" in heads and "head" in heads:
        pairs = [(heads["layer"], heads["head"])]  # one row (a pandas Series)
    else:
        try:
            items = list(heads)
        except TypeError:
            raise TypeError(f"heads=: a heads file path, compare's heads table or a list of (layer, head), not "
                            f"{type(heads).__name__}") from None
        pairs = []
        for item in items:
            if isinstance(item, dict) or (hasattr(item, "get") and hasattr(item, "keys")):
                pairs.append((item["layer"], item["head"]))
            elif hasattr(item, "layer") and hasattr(item, "head") and not isinstance(item, (tuple, list)) \
                    or (isinstance(item, tuple) and hasattr(item, "_fields")):
                pairs.append((item.layer, item.head))
            elif isinstance(item, (tuple, list)) and len(item) == 2:
                pairs.append((item[0], item[1]))
            else:
                raise TypeError(f"heads=: each head is a (layer, head) pair or a row with layer and head, "
                                f"not {item!r}")
    return [(_whole(layer, "layer"), _whole(head, "head")) for layer, head in pairs]


@_edit("rewind")
def rewind(*, base: Any, model: Any, out: Union[str, os.PathLike], reference: Any = None,
           fraction: Optional[float] = None, heads: Any = None, order: str = "importance",
           scale_scope: str = "global", seed: int = 42, kv_policy: str = "all", o_bias: str = "keep",
           as_lora: bool = False, unit: Optional[str] = None, router: str = "keep", threads: int = 0,
           max_memory: Optional[Union[str, int]] = None,
           store: Optional[Union[str, os.PathLike]] = None, progress: bool = False, max_shard_size: Union[str, int] = "5G",
        device: str = "cpu", roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None, allow_nonfinite: bool = False) -> dict:
    """`edit rewind`: give heads' Q, K, V, O blocks the base's values. Exactly one of `fraction` (rank
    the heads with compare and rewind round(fraction × heads) lowest) and `heads`: a heads CSV path,
    compare's heads table (`cmp.heads`, or any subset of its rows: a DataFrame, a dict of lists, rows
    from itertuples()) with `layer` and `head` columns of one model, or a list of (layer, head).
    order, scale_scope, seed, kv_policy: the ranking's and the rewind's options (the CLI's); threads,
    max_memory, store: the ranking compare's. o_bias: a layer's shared output bias, "keep" (the model's)
    or "base". as_lora: `model` is "BASE+ADAPTER": write the adapter with the rewound heads' factors
    zeroed. The result adds "heads": [(layer, head), ...].

    unit="experts" (the default when `experts` is given): rewind experts of a mixture of experts
    instead, every matrix and bias of theirs, written in the input's layout — the lowest round(fraction
    × routed experts) of compare's expert ranking, or without `fraction` the experts `experts` (and
    `layers`) name; router "keep" leaves their router rows as the model's, "base" rewinds them too.
    The result then adds "experts": [(layer, expert or "shared"), ...]."""
    from . import _checked_int

    heads = _heads_arg(heads)
    seed, threads = _checked_int(seed, "seed", 0, 2**64 - 1), _checked_int(threads, "threads", 0, 2**31 - 1)
    with _common(progress, max_shard_size, False, device, roles, layers, match, exclude, experts, component, allow_nonfinite) as c:
        return _core.edit_rewind(os.fspath(out), _model(base, "base"), _model(model),
                                 None if reference is None else _model(reference, "reference"), fraction, heads,
                                 order, scale_scope, seed, kv_policy, o_bias, bool(as_lora), c, threads,
                                 "" if max_memory is None else str(max_memory),
                                 "" if store is None else os.fspath(store),
                                 unit="" if unit is None else str(unit), router=str(router))


@_edit("truncate")
def truncate(*, base: Any, model: Any, out: Union[str, os.PathLike], keep: Optional[float] = None,
             rank: Optional[int] = None, energy: Optional[float] = None, as_lora: bool = False,
             per_head: bool = False, progress: bool = False, max_shard_size: Union[str, int] = "5G",
        device: str = "cpu", roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None, allow_nonfinite: bool = False) -> dict:
    """`edit truncate`: W = W_base + the best rank-k approximation of W − W_base; exactly one of keep
    (k = ceil(keep × min(rows, cols))), rank (k) and energy (fewest values holding that share of Σs²).
    per_head: truncate each attention head block separately. as_lora (with rank): write the rank-k
    deltas of the projections as a PEFT LoRA adapter instead; returns {"modules": n, "not_in_adapter": [...]}."""
    from . import _checked_int

    rank = None if rank is None else _checked_int(rank, "rank", 0, 2**63 - 1)
    with _common(progress, max_shard_size, per_head, device, roles, layers, match, exclude, experts, component, allow_nonfinite) as c:
        return _core.edit_truncate(os.fspath(out), _model(base, "base"), _model(model), keep, rank, energy,
                                   bool(as_lora), c)


@_edit("merge_lora")
def merge_lora(*, adapter: Union[str, os.PathLike], out: Union[str, os.PathLike],
               base: Optional[Union[str, os.PathLike]] = None, progress: bool = False, max_shard_size: Union[str, int] = "5G",
        device: str = "cpu", roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None, allow_nonfinite: bool = False) -> dict:
    """`edit merge-lora`: W = W_base + scale·B·A, a PEFT LoRA adapter merged into its base and written as
    a plain checkpoint laid out as the base. base: a path or id (default: the adapter's
    base_model_name_or_path)."""
    with _common(progress, max_shard_size, False, device, roles, layers, match, exclude, experts, component, allow_nonfinite) as c:
        return _core.edit_merge_lora(os.fspath(out), os.fspath(adapter), "" if base is None else os.fspath(base), c)


@_edit("transplant")
def transplant(*, base: Any, model: Any, out: Union[str, os.PathLike], per_head: bool = False,
               progress: bool = False, max_shard_size: Union[str, int] = "5G",
        device: str = "cpu", roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None, allow_nonfinite: bool = False) -> dict:
    """`edit transplant`: W = U_model diag(σ_base) V_modelᵀ (per_head: per attention head block)."""
    with _common(progress, max_shard_size, per_head, device, roles, layers, match, exclude, experts, component, allow_nonfinite) as c:
        return _core.edit_transplant(os.fspath(out), _model(base, "base"), _model(model), c)


@_edit("permute")
def permute(*, model: Any, out: Union[str, os.PathLike], seed: int = 42, per_head: bool = False,
            progress: bool = False, max_shard_size: Union[str, int] = "5G",
        device: str = "cpu", roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None, allow_nonfinite: bool = False) -> dict:
    """`edit permute`: each matrix's singular values permuted (seeded by seed and the matrix name;
    per_head: per attention head block)."""
    from . import _checked_int

    seed = _checked_int(seed, "seed", 0, 2**64 - 1)
    with _common(progress, max_shard_size, per_head, device, roles, layers, match, exclude, experts, component, allow_nonfinite) as c:
        return _core.edit_permute(os.fspath(out), _model(model), seed, c)


@_edit("interpolate")
def interpolate(a: Any, b: Any, *, out: Union[str, os.PathLike], omega: Optional[float] = None,
                grid: Union[str, Sequence[float], None] = None, max_candidates: int = 1000,
                progress: bool = False, max_shard_size: Union[str, int] = "5G",
        device: str = "cpu", roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None, allow_nonfinite: bool = False) -> dict:
    """`edit interpolate A B --omega W --out DIR`: W = (1 − ω) A + ω B (ω = 0 or 1 copy A's or B's
    bytes). Or grid ("START:STOP:STEP" or a list of ωs, at most max_candidates): one checkpoint per ω in
    OUT/omega_X.XX, written all or nothing; returns {"checkpoints": [(ω, directory name), ...]}."""
    from .sweep import _grid  # the sweeps' spelling of a grid: "START:STOP:STEP" or numbers

    from . import _checked_int

    grid = None if grid is None else _grid(grid, "grid")
    max_candidates = _checked_int(max_candidates, "max_candidates", 1)
    with _common(progress, max_shard_size, False, device, roles, layers, match, exclude, experts, component, allow_nonfinite) as c:
        return _core.edit_interpolate(os.fspath(out), _model(a, "a"), _model(b, "b"),
                                      None if omega is None else float(omega), grid or "", int(max_candidates), c)


@_edit("merge")
def merge(*, base: Any, models: Sequence[Any], out: Union[str, os.PathLike], method: str = "task_arithmetic",
          weights: Sequence[float] = (), density: float = 1.0, lambda_: float = 1.0,
          normalize: Optional[bool] = None, seed: int = 0, progress: bool = False, max_shard_size: Union[str, int] = "5G",
        device: str = "cpu", roles: Roles = None, layers: Layers = None, match: Optional[str] = None,
        exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None, allow_nonfinite: bool = False) -> dict:
    """`edit merge`: mergekit's task arithmetic, ties, dare_linear or dare_ties over the models' deltas
    from base. normalize None: the method's default (--normalize / --no-normalize: True / False)."""
    if isinstance(models, (str, bytes, os.PathLike)):  # one path would be iterated as its characters
        raise TypeError("merge: models is a list of models (paths or opened checkpoints), not one string")
    from . import _checked_int

    seed = _checked_int(seed, "seed", 0, 2**64 - 1)
    with _common(progress, max_shard_size, False, device, roles, layers, match, exclude, experts, component, allow_nonfinite) as c:
        return _core.edit_merge(os.fspath(out), _model(base, "base"), [_model(m, "models") for m in models],
                                method, [float(w) for w in weights], float(density), float(lambda_), normalize,
                                seed, c)
