"""diffract: spectral analysis of LLM checkpoints, from Python.

A thin binding of the C++ engine (see docs/python.md). Everything computes in C++; this package only
converts arguments and results:

    import diffract_spectral as diffract
    ck = diffract.open("org/model")              # path, HF cache id, .gguf, or NAME=PATH
    w = ck["model.layers.0.self_attn.q_proj.weight"]   # zero-copy, read-only numpy view
    res = diffract.analyze([ck], metrics="default")
    res.metrics                                  # pandas DataFrame (dict of lists without pandas)
    cmp = diffract.compare(["math", "code"], base="pre", reference="text")
    diffract.edit.interpolate("pre", "math", omega=0.5, out="mid")

Arguments follow the CLI: its positionals (MODEL...) are positional here, its options keywords of the
same names (--out DIR is out=DIR).

Errors a user or a file can cause raise diffract.InputError (a ValueError) with the CLI's message.
"""
from __future__ import annotations

import builtins
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core, _progress, _tables, _torch_models
from ._core import InputError
from ._report import Figure, Figures, figures, report

if TYPE_CHECKING:  # for type checkers and IDEs only: pandas stays optional at runtime
    import pandas as pd

__version__ = _core.__version__  # the CLI's `diffract --version`: CMakeLists.txt's project(VERSION)

__all__ = [
    "InputError", "Checkpoint", "open", "from_arrays", "analyze", "compare", "generate", "metric",
    "unregister_metric", "registered_metrics", "catalog", "resolve_metrics", "Analysis", "Comparison", "edit",
    "sweep", "report", "figures", "Figure", "Figures", "from_model", "watch", "Watch",
]

try:  # optional: BF16 / F8 tensors as ml_dtypes arrays (zero-copy); decoded float32 copies otherwise
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None

_ML_DTYPE_NAMES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_NUMPY_TO_DTYPE = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16", "uint32": "U32",
    "int32": "I32", "uint64": "U64", "int64": "I64", "float16": "F16", "float32": "F32", "float64": "F64",
    "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}
_BITS_VIEW = {1: np.uint8, 2: np.uint16}


def _pandas():
    """Returns the pandas module, or None when it is not importable."""
    try:
        import pandas
    except ImportError:
        return None
    return pandas


def _table(columns: dict):
    """A pandas DataFrame of the columns when pandas is importable, else the dict of lists itself
    (_tables.table: layer and head are Int64)."""
    return _tables.table(columns, _pandas())


class Checkpoint:
    """An opened checkpoint: its tensors as numpy arrays, without copying when the dtype allows.

    Tensors of dtype F32/F16/F64, integers and BOOL are read-only numpy views of the mapped file (or of
    the caller's buffer for in-memory models); each view keeps the mapping alive. BF16 and F8 tensors
    are ml_dtypes views when ml_dtypes is importable, else decoded float32 copies. GGUF block-quantised
    tensors (Q8_0, Q4_K, IQ2_XS, ...) are decoded float32 copies.
    """

    def __init__(self, core: "_core.Checkpoint"):
        """Wraps an opened diffract_spectral._core.Checkpoint (use diffract.open or diffract.from_arrays)."""
        self._core = core

    @property
    def name(self) -> str:
        """The display name (NAME= if given, else the file or directory name)."""
        return self._core.name

    @property
    def path(self) -> str:
        """The resolved file or directory ("memory:NAME" for in-memory models)."""
        return self._core.path

    @property
    def format(self) -> str:
        """"safetensors" or "gguf" (in-memory models follow the safetensors conventions)."""
        return self._core.format

    @property
    def config(self) -> Optional[dict]:
        """The config.json (for GGUF: the head geometry mapped to HF keys), or None."""
        text = self._core.config_json
        return json.loads(text) if text else None

    @property
    def architecture(self) -> str:
        """The architecture the schema recognised (e.g. "LlamaForCausalLM"), or "unknown"."""
        return self._core.architecture

    def tensor_names(self) -> list:
        """The tensor names, in file order."""
        return self._core.tensor_names()

    def info(self, name: str) -> dict:
        """Name, dtype (safetensors spelling), shape, nbytes, offset and file path of one tensor."""
        return self._core.tensor_info(name)

    def describe(self) -> dict:
        """What `diffract inspect --json` prints: format, architecture, heads, parameters, tensors and,
        for a model with a LoRA adapter merged, "adapter" (path, base, r, lora_alpha, use_rslora,
        target_modules, per-module targets with rank/alpha/scale, tensors replaced whole)."""
        return self._core.describe()

    def tensor(self, name: str, *, decode: bool = False) -> np.ndarray:
        """One tensor as a numpy array (see the class docstring); decode=True: a float32 copy."""
        if decode:
            return self._core.decoded(name)
        dtype = self._core.tensor_info(name)["dtype"]
        if dtype in _ML_DTYPE_NAMES:
            if _ml_dtypes is None:
                return self._core.decoded(name)
            return self._core.view(name).view(getattr(_ml_dtypes, _ML_DTYPE_NAMES[dtype]))
        return self._core.view(name)

    def __getitem__(self, name: str) -> np.ndarray:
        """Same as tensor(name)."""
        return self.tensor(name)

    def __contains__(self, name: object) -> bool:
        """Whether the checkpoint has a tensor of that name."""
        return name in self._core.tensor_names()

    def __len__(self) -> int:
        """The number of tensors."""
        return len(self._core.tensor_names())

    def __iter__(self) -> Iterator[str]:
        """The tensor names, in file order (like a dict)."""
        return iter(self._core.tensor_names())

    def keys(self) -> list:
        """The tensor names, in file order."""
        return self._core.tensor_names()

    def items(self) -> Iterator[tuple]:
        """(name, array) for every tensor, in file order; arrays as tensor(name)."""
        for n in self._core.tensor_names():
            yield n, self.tensor(n)

    def __repr__(self) -> str:
        """A one-line description."""
        return f"<diffract.Checkpoint {self.name!r} ({self.format}, {len(self)} tensors) at {self.path!r}>"


def open(spec: Union[str, os.PathLike], *, name: Optional[str] = None) -> Checkpoint:  # noqa: A001
    """Opens a checkpoint as the CLI does: a .safetensors file, an HF model directory (sharded or
    not), a .gguf file, an id in the local Hugging Face cache ("org/name[@revision]"), or NAME=PATH.
    `name` overrides the display name. Raises InputError with the CLI's message."""
    spec = os.fspath(spec)
    if name is not None:
        spec = f"{name}={spec}"
    return Checkpoint(_core.open_checkpoint(spec))


def _as_buffer(array: Any) -> tuple:
    """(safetensors dtype name, C-contiguous array whose bytes are the tensor) for one array-like."""
    if type(array).__module__.startswith("torch"):
        return _torch_buffer(array)
    arr = np.asarray(array)
    dtype = _NUMPY_TO_DTYPE.get(arr.dtype.name)
    if dtype is None:
        raise InputError(f"unsupported array dtype {arr.dtype} (expected {', '.join(_NUMPY_TO_DTYPE)})")
    arr = np.ascontiguousarray(arr)
    if dtype in _ML_DTYPE_NAMES:  # numpy cannot export ml_dtypes arrays: pass their bits
        arr = arr.view(_BITS_VIEW[arr.dtype.itemsize])
    return dtype, arr


def _torch_buffer(tensor: Any) -> tuple:
    """A torch tensor as (dtype name, numpy array), via .numpy() (torch is never imported here)."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    dtype = str(t.dtype).replace("torch.", "")
    if dtype in _ML_DTYPE_NAMES.values():  # no numpy dtype: view the bits
        bits = {"bfloat16": "int16", "float8_e4m3fn": "int8", "float8_e5m2": "int8"}[dtype]
        import torch  # only reached when a torch tensor was given

        arr = t.view(getattr(torch, bits)).numpy().view(_BITS_VIEW[t.element_size()])
        return _NUMPY_TO_DTYPE[dtype], arr
    return _as_buffer(t.numpy())


def from_arrays(tensors: Mapping[str, Any], *, name: str = "memory",
                config: Optional[Union[dict, str, os.PathLike]] = None) -> Checkpoint:
    """An in-memory checkpoint from a dict of arrays: numpy arrays (any supported dtype, including
    ml_dtypes bfloat16/float8) or a PyTorch state_dict (tensors converted with .numpy(), torch not
    required otherwise). C-contiguous CPU arrays are not copied; the checkpoint keeps them alive.
    `config`: an HF config.json (dict or path) giving the head geometry for per-head rows."""
    if config is not None and not isinstance(config, dict):
        with builtins.open(os.fspath(config), encoding="utf-8") as f:
            config = json.load(f)
    items = [(str(k), *_as_buffer(v)) for k, v in tensors.items()]
    return Checkpoint(_core.from_buffers(name, items, json.dumps(config) if config is not None else ""))


def from_model(model: Any, *, name: Optional[str] = None) -> Checkpoint:
    """An in-memory checkpoint of a model object: a transformers PreTrainedModel (its config gives the
    head geometry), a PEFT model (each LoRA layer as its effective weight W + scaling·B·A, the rest read
    in place) or any torch nn.Module. Tensors are not copied (CPU, contiguous); tied copies are dropped
    as save_pretrained drops them, so the rows equal those of the saved model."""
    default_name, state, config = _torch_models.model_state(model)
    return from_arrays(state, name=name or default_name, config=config)


def _is_one_model(models: Any) -> bool:
    return isinstance(models, (str, os.PathLike, Checkpoint, Mapping)) or _torch_models.is_model_object(models)


def _model_arg(model: Any) -> Any:
    """A model argument for the engine: a spec string or an opened _core.Checkpoint."""
    if isinstance(model, Checkpoint):
        return model._core
    if isinstance(model, Mapping):
        return from_arrays(model)._core
    if _torch_models.is_model_object(model):
        return from_model(model)._core
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"a model is a path or id, a Checkpoint, a dict of arrays (state_dict) or a torch/"
                        f"transformers/PEFT model object, not {type(model).__name__}")
    return os.fspath(model)


def _run_args(threads, max_memory, store, device, progress, roles, layers, match, exclude) -> "_core.RunArgs":
    """The shared run options (--threads, --max-memory, --store, --device, selection) for the engine;
    progress: None or the callable receiving the engine's (done, total, label) reports (_progress)."""
    r = _core.RunArgs()
    r.threads = int(threads)
    r.max_memory = "" if max_memory is None else str(max_memory)
    r.store = "" if store is None else os.fspath(store)
    r.device = device
    if progress is not None:  # the field defaults to None (nanobind refuses None for an object field)
        r.progress = progress
    _set_selection(r, roles, layers, match, exclude)
    return r


def _set_selection(args, roles, layers, match, exclude) -> None:
    """The selection flags (--roles, --layers, --match, --exclude) on a bound argument struct."""
    args.roles = _roles_spec(roles)
    args.layers = _layers_spec(layers)
    args.match = match or ""
    args.exclude = exclude or ""


def _roles_spec(roles) -> str:
    """--roles as text: "attn_q,mlp_down" as is, or an iterable of role names."""
    return roles if isinstance(roles, str) else ",".join(roles or ())


def _layers_spec(layers) -> str:
    """--layers as text: "0-3,7" as is, or an iterable of ints."""
    if layers is None:
        return ""
    if isinstance(layers, str):
        return layers
    if isinstance(layers, int):
        return str(layers)
    return ",".join(str(int(x)) for x in layers)


def _metrics_spec(metrics) -> str:
    """--metrics as text: a string as is, or a list of names and @metric functions."""
    if isinstance(metrics, str):
        return metrics
    return ",".join(getattr(m, "metric_name", m) for m in metrics)


@dataclass
class Analysis:
    """The result of analyze: per-matrix rows (metrics.csv), per-model aggregates (aggregates.csv),
    the field columns, and how many matrices were computed or reused from the store."""
    metrics: pd.DataFrame
    aggregates: pd.DataFrame
    fields: list
    computed: int
    reused: int


@dataclass
class Comparison:
    """The result of compare: per-matrix rows (compare.csv), per-head rows (heads.csv), the skipped
    items (--allow-partial), and how many (model, matrix) pairs were computed or reused."""
    matrices: pd.DataFrame
    heads: pd.DataFrame
    skipped: pd.DataFrame
    computed: int
    reused: int


def _warn_nonfinite(lines) -> None:
    """One RuntimeWarning per tensor with NaN/Inf entries (the CLI's "diffract: warning:" lines); the
    rows of its matrices have nonfinite_count > 0 and NaN metrics."""
    for line in lines:
        warnings.warn(line, RuntimeWarning, stacklevel=3)


def analyze(models, *, metrics: Union[str, Sequence] = "default", heads: bool = True,
            precision: str = "f64", svd_route: str = "auto", seed: int = 42, threads: int = 0,
            max_memory: Optional[str] = None, store: Optional[str] = None, device: str = "cpu",
            roles=None, layers=None, match: Optional[str] = None, exclude: Optional[str] = None,
            progress: bool = False, out: Optional[str] = None, min_fit_size: int = 50, alpha_ci: int = 0,
            alpha_ci_seed: int = 0, null_draws: int = 1, p_value_draws: int = 100,
            convention: str = "diffract") -> Analysis:
    """`diffract analyze`: the metric catalog for every selected matrix and attention head.

    models: one model or a list — spec strings (PATH, org/name[@rev], NAME=PATH), Checkpoints, dicts
    of arrays / state_dicts, or model objects (transformers, PEFT, torch nn.Module: from_model). Options mirror the CLI (--metrics, --no-heads → heads=False,
    --precision, --svd-route, --seed, --threads, --max-memory, --store, --device, --roles, --layers,
    --match, --exclude, --min-fit-size, --alpha-ci, --alpha-ci-seed, --null-draws, --p-value-draws,
    --convention); metrics may name
    @diffract.metric functions. Fit statuses (pl_status, ...) are names, as in metrics.csv. out: also
    write metrics.csv and aggregates.csv there (and weightwatcher.csv with convention="weightwatcher").
    progress=True: a tqdm bar (stderr lines without tqdm). Returns an Analysis (pandas DataFrames, or
    dicts of lists without pandas). The GIL is released while computing; Ctrl-C raises KeyboardInterrupt."""
    if _is_one_model(models):
        models = [models]
    with _progress.display(progress) as sink:
        r = _core.analyze([_model_arg(m) for m in models], _metrics_spec(metrics), heads, precision, svd_route,
                          seed, min_fit_size, alpha_ci, alpha_ci_seed, null_draws, p_value_draws, convention,
                          _run_args(threads, max_memory, store, device, sink, roles, layers, match, exclude),
                          "" if out is None else os.fspath(out))
    _warn_nonfinite(r["warnings"])
    return Analysis(_table(r["rows"]), _table(r["aggregates"]), list(r["fields"]), r["computed"], r["reused"])


def compare(models=(), *, base, reference=None, top_k: int = 10, scale_scope: str = "global",
            order: str = "importance", seed: int = 42, precision: str = "f64", svd_route: str = "auto",
            heads: bool = True, allow_partial: bool = False, delta_only: bool = False, threads: int = 0,
            max_memory: Optional[str] = None,
            store: Optional[str] = None, device: str = "cpu", roles=None, layers=None,
            match: Optional[str] = None, exclude: Optional[str] = None, progress: bool = False,
            out: Optional[str] = None) -> Comparison:
    """`diffract compare MODEL... --base BASE`: every matrix and head block of each model (one or a
    list) against the base, and the per-head update norms, importance and ranking (with `reference`).

    Options mirror the CLI (--base, --reference, --top-k, --scale-scope, --order, --seed, --precision,
    --svd-route, --no-heads → heads=False, --allow-partial, --delta-only and the run options). Models (and base,
    reference) are what analyze takes: specs, Checkpoints, state_dicts or model objects. out: also write compare.csv and heads.csv there.
    progress=True: a tqdm bar. Returns a Comparison of DataFrames (dicts of lists without pandas)."""
    if _is_one_model(models):
        models = [models]
    with _progress.display(progress) as sink:
        r = _core.compare(_model_arg(base), [_model_arg(m) for m in models],
                          None if reference is None else _model_arg(reference), top_k, scale_scope, order, seed,
                          precision, svd_route, heads, allow_partial, delta_only,
                          _run_args(threads, max_memory, store, device, sink, roles, layers, match, exclude),
                          "" if out is None else os.fspath(out))
    _warn_nonfinite(r["warnings"])
    for line in r["findings"]:  # e.g. no head stands out: the ranking orders noise
        warnings.warn(line, UserWarning, stacklevel=2)
    return Comparison(_table(r["rows"]), _table(r["heads"]), _table(r["skipped"]), r["computed"], r["reused"])


@dataclass
class Watch:
    """The result of watch: what became of each checkpoint (checkpoints.csv), the analyze and compare
    tables with a `step` column (compare and heads empty without a base), trends.csv and alerts.csv."""
    checkpoints: pd.DataFrame
    metrics: pd.DataFrame
    aggregates: pd.DataFrame
    compare: pd.DataFrame
    heads: pd.DataFrame
    trends: pd.DataFrame
    alerts: pd.DataFrame


def watch(run_dir: Union[str, os.PathLike], *, out: Union[str, os.PathLike], base=None,
          metrics: Union[str, Sequence] = "default", heads: bool = True, precision: str = "f64",
          svd_route: str = "auto", seed: int = 42, min_fit_size: int = 50, delta_only: bool = False,
          follow: bool = False, every: int = 1,
          until_step: Optional[int] = None, poll: float = 10, settle: float = 2, alpha_low: float = 2,
          alpha_high: float = 6, alpha_jump: float = 1.0, stable_rank_jump: float = 0.2, head_share: float = 0.5,
          threads: int = 0, max_memory: Optional[str] = None, store: Optional[str] = None, device: str = "cpu",
          roles=None, layers=None, match: Optional[str] = None, exclude: Optional[str] = None,
          progress: bool = False) -> Watch:
    """`diffract watch RUN_DIR --out DIR`: every checkpoint of a training run (Trainer's checkpoint-<step>/,
    step-named model directories or files), analysed (and compared with `base`) through the store, so a
    second call computes only new checkpoints. Options mirror the CLI (docs/watch.md). follow=True keeps
    watching until `until_step` or Ctrl-C (KeyboardInterrupt; the tables of every finished checkpoint are
    written). The lines the CLI prints go to the "diffract_spectral.watch" logger (alerts as warnings).
    Returns a Watch of DataFrames, each analyze/compare table with a `step` column."""
    import logging

    log = logging.getLogger("diffract_spectral.watch")

    def notice(line: str) -> None:
        log.log(logging.WARNING if ": alert: " in line or ": warning: " in line else logging.INFO, line)

    t = _core.AlertThresholds()
    t.alpha_low, t.alpha_high, t.alpha_jump = float(alpha_low), float(alpha_high), float(alpha_jump)
    t.stable_rank_jump, t.head_share = float(stable_rank_jump), float(head_share)
    with _progress.display(progress) as sink:
        r = _core.watch(os.fspath(run_dir), os.fspath(out), "" if base is None else os.fspath(base),
                        _metrics_spec(metrics), heads, precision, svd_route, seed, min_fit_size, delta_only, follow,
                        every,
                        until_step, float(poll), float(settle), t,
                        _run_args(threads, max_memory, store, device, sink, roles, layers, match, exclude), notice)
    _warn_nonfinite(r["warnings"])
    return Watch(*(_table(r[k]) for k in ("checkpoints", "metrics", "aggregates", "compare", "heads", "trends",
                                          "alerts")))


def generate(*, out: Union[str, os.PathLike], preset: str = "tiny", layers: Optional[int] = None,
             hidden: Optional[int] = None, heads: Optional[int] = None, kv_heads: Optional[int] = None,
             intermediate: Optional[int] = None, vocab: Optional[int] = None,
             domains: Sequence[str] = ("math", "code"), reference: str = "text", domain_heads: int = 2,
             generic_heads: int = 2, dtype: str = "BF16", shard_mb: float = 0, seed: int = 0,
             models: Optional[Sequence[str]] = None) -> str:
    """`diffract generate`: writes the deterministic synthetic family (OUT/pretrained, one model per
    domain and the reference) with the CLI's defaults; returns `out`. preset: "tiny" (4 layers, hidden
    256, 8 heads), "1b" or "7b" (OLMo-2's shapes); a shape argument given overrides the preset's value.
    models: write only these (e.g. ["pretrained", "math"])."""
    out = os.fspath(out)
    if isinstance(models, str):
        models = [models]
    _core.generate(out, preset, layers, hidden, heads, kv_heads, intermediate, vocab, list(domains), reference,
                   domain_heads, generic_heads, dtype, shard_mb, seed, list(models or ()))
    return out


def _code_version(fn: Callable) -> str:
    """A hash of a function's code (bytecode, constants, names): a changed function gets new results."""
    code = fn.__code__
    h = hashlib.sha256(code.co_code)
    h.update(repr((code.co_consts, code.co_names, code.co_varnames)).encode())
    return h.hexdigest()[:16]


def metric(needs: Sequence[str] = ("weights_svals",), *, name: Optional[str] = None,
           version: Optional[str] = None) -> Callable:
    """Decorator: a custom per-matrix metric, computed by the engine for every matrix and head block
    in the task of its built-in fields (on the worker threads) and kept in the store like them.

    needs: the inputs, passed positionally in this order — "weights_svals" (singular values,
    ascending), "esd" (sigma^2 / max(rows, cols), ascending), "weights" (the matrix, float64). The
    function returns a float. name defaults to the function's name; version (part of the store key)
    defaults to a hash of the function's code. Ask for it with analyze(metrics=[..., fn]) or by name."""
    needs = [needs] if isinstance(needs, str) else list(needs)

    def register(fn: Callable) -> Callable:
        """Registers fn and tags it with metric_name."""
        metric_name = name or fn.__name__
        _core.register_metric(metric_name, needs, version or _code_version(fn), fn)
        fn.metric_name = metric_name
        return fn

    return register


def unregister_metric(name: Union[str, Callable]) -> bool:
    """Forgets a custom metric (by name or decorated function); returns whether it was registered."""
    return _core.unregister_metric(getattr(name, "metric_name", name))


def registered_metrics() -> list:
    """The names of the registered custom metrics."""
    return _core.registered_metrics()


def catalog():
    """The metric catalog (`diffract metrics`): name, level, is_vector, formula, inputs, in_default."""
    return _table(_core.catalog())


def resolve_metrics(spec: Union[str, Sequence]) -> list:
    """The field names a --metrics value selects ("default", "all", names, custom metrics)."""
    return _core.resolve_metrics(_metrics_spec(spec))


from . import edit  # noqa: E402  (edit uses the helpers above)
from . import sweep  # noqa: E402  (sweep too)
