"""`diffract edit ...` from Python: each function writes an edited HF model directory `out` (which must
not exist) and returns {"edited": n, "copied": n, "changed": n} ("changed": the edited tensors whose bytes
differ from the input's; rewind adds "heads": [(layer, head), ...]).

Arguments follow the CLI: the positionals of `edit interpolate A B` are positional, every option is a
keyword of the same name (--out DIR is out=DIR, --omega W omega=W). Models are spec strings,
Checkpoints or dicts of arrays (in memory). Every edit also takes max_shard_size ("5G"), roles,
layers, match, exclude, device, progress (True: a tqdm bar over the tensors written) and
allow_nonfinite (--allow-nonfinite: edit tensors holding NaN/Inf, keeping those entries unchanged; by
default such a tensor is refused with InputError), and the SVD edits take per_head. The GIL is released
while writing.
"""
from __future__ import annotations

import contextlib
import inspect
import os
from typing import Iterator, Optional, Sequence

from . import _core, _progress
from ._keywords import refuse_unknown

__all__ = ["rewind", "truncate", "transplant", "permute", "interpolate", "merge", "merge_lora"]

# The edits whose CLI command takes --per-head (the SVD edits); the others refuse per_head as it does.
_PER_HEAD_EDITS = ("truncate", "transplant", "permute")


def _model(m):
    """A model argument for the engine (spec string or opened checkpoint)."""
    from . import _model_arg

    return _model_arg(m)


def _options(edit: str, common: dict):
    """The options every edit takes, checked by name for `edit` (a mistyped or foreign keyword is named
    with the function the user called, not this module's helper), as _common's context."""
    allowed = [p for p in inspect.signature(_common.__wrapped__).parameters
               if p != "per_head" or edit in _PER_HEAD_EDITS]
    refuse_unknown(edit, common, allowed,
                   lambda name: " (streaming edits read one tensor at a time: no store, threads or memory budget)"
                   if name in ("store", "threads", "max_memory") else "")
    return _common(**common)


@contextlib.contextmanager
def _common(progress=False, max_shard_size="5G", per_head=False, device="cpu", roles=None, layers=None, match=None,
            exclude=None, allow_nonfinite=False) -> Iterator["_core.EditArgs"]:
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
        _set_selection(c, roles, layers, match, exclude)
        yield c


def rewind(*, base, model, out, reference=None, fraction: Optional[float] = None, heads=None,
           order: str = "importance", scale_scope: str = "global", seed: int = 42, kv_policy: str = "all",
           o_bias: str = "keep", as_lora: bool = False, threads: int = 0, max_memory: Optional[str] = None,
           store: Optional[str] = None, **common) -> dict:
    """`edit rewind`: give heads' Q, K, V, O blocks the base's values. Exactly one of `fraction` (rank
    the heads with compare and rewind round(fraction × heads) lowest) and `heads` (a CSV path, or a
    list of (layer, head)). o_bias: a layer's shared output bias, "keep" (the model's) or "base".
    as_lora: `model` is "BASE+ADAPTER": write the adapter with the rewound heads' factors zeroed."""
    if heads is not None and not isinstance(heads, (str, os.PathLike)):
        heads = [(int(layer), int(head)) for layer, head in heads]
    elif heads is not None:
        heads = os.fspath(heads)
    with _options("rewind", common) as c:
        return _core.edit_rewind(os.fspath(out), _model(base), _model(model),
                                 None if reference is None else _model(reference), fraction, heads, order,
                                 scale_scope, seed, kv_policy, o_bias, bool(as_lora), c, threads,
                                 "" if max_memory is None else str(max_memory),
                                 "" if store is None else os.fspath(store))


def truncate(*, base, model, out, keep: Optional[float] = None, rank: Optional[int] = None,
             energy: Optional[float] = None, as_lora: bool = False, **common) -> dict:
    """`edit truncate`: W = W_base + the best rank-k approximation of W − W_base; exactly one of keep
    (k = ceil(keep × min(rows, cols))), rank (k) and energy (fewest values holding that share of Σs²).
    as_lora (with rank): write the rank-k deltas of the projections as a PEFT LoRA adapter instead;
    returns {"modules": n, "not_in_adapter": [...]}."""
    with _options("truncate", common) as c:
        return _core.edit_truncate(os.fspath(out), _model(base), _model(model), keep, rank, energy, bool(as_lora), c)


def merge_lora(*, adapter, out, base=None, **common) -> dict:
    """`edit merge-lora`: W = W_base + scale·B·A, a PEFT LoRA adapter merged into its base and written as
    a plain checkpoint laid out as the base. base: a path or id (default: the adapter's
    base_model_name_or_path)."""
    with _options("merge_lora", common) as c:
        return _core.edit_merge_lora(os.fspath(out), os.fspath(adapter), "" if base is None else os.fspath(base), c)


def transplant(*, base, model, out, **common) -> dict:
    """`edit transplant`: W = U_model diag(σ_base) V_modelᵀ."""
    with _options("transplant", common) as c:
        return _core.edit_transplant(os.fspath(out), _model(base), _model(model), c)


def permute(*, model, out, seed: int = 42, **common) -> dict:
    """`edit permute`: each matrix's singular values permuted (seeded by seed and the matrix name)."""
    with _options("permute", common) as c:
        return _core.edit_permute(os.fspath(out), _model(model), seed, c)


def interpolate(a, b, *, out, omega: Optional[float] = None, grid=None, max_candidates: int = 1000,
                **common) -> dict:
    """`edit interpolate A B --omega W --out DIR`: W = (1 − ω) A + ω B (ω = 0 or 1 copy A's or B's
    bytes). Or grid ("START:STOP:STEP" or a list of ωs, at most max_candidates): one checkpoint per ω in
    OUT/omega_X.XX, written all or nothing; returns {"checkpoints": [(ω, directory name), ...]}."""
    from .sweep import _grid  # the sweeps' spelling of a grid: "START:STOP:STEP" or numbers

    grid = None if grid is None else _grid(grid)
    with _options("interpolate", common) as c:
        return _core.edit_interpolate(os.fspath(out), _model(a), _model(b), None if omega is None else float(omega),
                                      grid or "", int(max_candidates), c)


def merge(*, base, models: Sequence, out, method: str = "task_arithmetic", weights: Sequence[float] = (),
          density: float = 1.0, lambda_: float = 1.0, normalize: Optional[bool] = None, seed: int = 0,
          **common) -> dict:
    """`edit merge`: mergekit's task arithmetic, ties, dare_linear or dare_ties over the models' deltas
    from base. normalize None: the method's default (--normalize / --no-normalize: True / False)."""
    if isinstance(models, (str, bytes, os.PathLike)):  # one path would be iterated as its characters
        raise TypeError("merge: models is a list of models (paths or opened checkpoints), not one string")
    with _options("merge", common) as c:
        return _core.edit_merge(os.fspath(out), _model(base), [_model(m) for m in models], method,
                                [float(w) for w in weights], float(density), float(lambda_), normalize, seed, c)
