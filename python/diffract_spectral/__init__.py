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

Errors a user or a file can cause raise diffract.InputError (a ValueError) with the CLI's message, its
options named as the Python arguments (`metrics=: unknown field ...`); an argument of the wrong type is a
TypeError naming it. `diffract.eval` (the shipped evaluators) is imported on first use.
"""
from __future__ import annotations

import builtins
import json
import os
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core, _display, _progress, _tables, _torch_models
from ._core import InputError
from ._keywords import python_errors as _python_errors
from ._report import Figure, Figures, figures, report

if TYPE_CHECKING:  # for type checkers and IDEs only: pandas stays optional at runtime
    import pandas as pd

    from . import eval  # noqa: A004  (imported on first use at runtime: __getattr__ below)

__version__ = _core.__version__  # the CLI's `diffract --version`: CMakeLists.txt's project(VERSION)

__all__ = [
    "InputError", "Checkpoint", "open", "from_arrays", "analyze", "compare", "generate", "metric",
    "unregister_metric", "registered_metrics", "catalog", "resolve_metrics", "Analysis", "Comparison", "edit",
    "sweep", "report", "figures", "Figure", "Figures", "from_model", "watch", "Watch", "eval", "describe",
    "inspect",
]

try:  # optional: BF16 / F8 tensors as ml_dtypes arrays (zero-copy); decoded float32 copies otherwise
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None

PathArg = Union[str, os.PathLike]
Roles = Union[str, Sequence[str], None]  # "attn_q,mlp_down" or a list of role names
Layers = Union[str, int, Sequence[int], None]
Experts = Union[str, int, Sequence[Union[int, str]], None]  # "0-7,shared", an expert index or a list
Components = Union[str, Sequence[str], None]  # "language,vision" or a list of component names  # "0-3,7", a layer index or a list of them

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


def _heads_table(columns: dict, group: tuple = ("model",), names: tuple = ("rank",)):
    """A head table: ranks as Python presents them (_tables.importance_ranks: 1 = most important,
    rewind_order = the CSV's rank) and, with pandas, `table.rank` the rank column (_tables.heads_frame)."""
    t = _table(_tables.importance_ranks(columns, group=group, names=names))
    return t if isinstance(t, dict) else _tables.heads_frame(t)


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


@_python_errors
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


@_python_errors
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
    text = ""
    if config is not None:
        try:  # NaN/Infinity are not JSON: refused here, by name, rather than by the engine's parser
            text = json.dumps(config, allow_nan=False)
        except ValueError:
            bad = [k for k, v in config.items() if isinstance(v, float) and not (v == v and abs(v) != float("inf"))]
            raise InputError(f"config=: {', '.join(map(repr, bad)) or 'a value'} is NaN or infinite (a config "
                             f"holds finite numbers)") from None
        except TypeError as e:
            raise TypeError(f"config=: not JSON ({e})") from None
    return Checkpoint(_core.from_buffers(name, items, text))


@_python_errors
def from_model(model: Any, *, name: Optional[str] = None) -> Checkpoint:
    """An in-memory checkpoint of a model object: a transformers PreTrainedModel (its config gives the
    head geometry), a PEFT model (each LoRA layer as its effective weight W + scaling·B·A, the rest read
    in place) or any torch nn.Module. Tensors are not copied (CPU, contiguous); tied copies are dropped
    as save_pretrained drops them, so the rows equal those of the saved model."""
    default_name, state, config = _torch_models.model_state(model)
    return from_arrays(state, name=name or default_name, config=config)


def _is_matrix(obj: Any) -> bool:
    """A bare numpy array or torch tensor (not a module): a one-matrix model."""
    if isinstance(obj, np.ndarray):
        return True
    return (type(obj).__module__.startswith("torch") and hasattr(obj, "shape") and hasattr(obj, "detach")
            and not _torch_models.is_model_object(obj))


def _is_one_model(models: Any) -> bool:
    return (isinstance(models, (str, bytes, bytearray, os.PathLike, Checkpoint, Mapping)) or _is_matrix(models)
            or _torch_models.is_model_object(models))


def _model_arg(model: Any, arg: str = "models", name: Optional[str] = None) -> Any:
    """A model argument for the engine: a spec string or an opened _core.Checkpoint. `arg` names the
    argument in errors; `name` an in-memory model (default "memory", a bare matrix "matrix")."""
    if isinstance(model, Checkpoint):
        return model._core
    if isinstance(model, Mapping):
        return from_arrays(model, name=name or "memory")._core
    if _is_matrix(model):
        shape = tuple(model.shape)
        if len(shape) != 2:
            raise InputError(f"{arg}=: a bare array is a one-matrix model and must be 2-D, found shape {shape} "
                             f"(give several tensors as a dict of arrays)")
        return from_arrays({"weight": model}, name=name or "matrix")._core
    if _torch_models.is_model_object(model):
        return from_model(model)._core
    if isinstance(model, (bytes, bytearray)):
        raise TypeError(f"{arg}=: a path is a str or os.PathLike, not bytes ({bytes(model)[:40]!r}; "
                        f"decode it with os.fsdecode)")
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"{arg}=: a model is a path or id, a Checkpoint, a dict of arrays (state_dict), a 2-D "
                        f"array or tensor (one matrix) or a torch/transformers/PEFT model object, not "
                        f"{type(model).__name__}")
    return os.fspath(model)


def _model_args(models: list) -> list:
    """The engine's arguments for a list of models; in-memory ones (dicts, bare matrices) are named
    apart when there are several (memory_0, matrix_1, ...: the engine wants one name per model)."""
    unnamed = [i for i, m in enumerate(models) if isinstance(m, Mapping) or _is_matrix(m)]
    names = {i: f"{'matrix' if _is_matrix(models[i]) else 'memory'}_{i}" for i in unnamed} if len(unnamed) > 1 else {}
    return [_model_arg(m, "models", names.get(i)) for i, m in enumerate(models)]


def _model_list(function: str, models: Any, model: Any) -> list:
    """The models of analyze/compare: the first argument or its alias model= (WeightWatcher's
    spelling), one model or a list of them."""
    if model is not None:
        if models is not None:
            raise TypeError(f"{function}() got the model twice: give it as the first argument or as model=, "
                            f"not both")
        models = model
    if models is None:
        return []
    if _is_one_model(models):
        return [models]
    try:
        return list(models)
    except TypeError:
        raise TypeError(f"{function}(): models= is a model or a list of models, not "
                        f"{type(models).__name__}") from None


@_python_errors
def describe(model: Any) -> dict:
    """`diffract inspect --json` for one model (what was read: format, architecture, head geometry,
    parameters, every tensor), as a dict; `model` is what analyze takes (a path or id, a Checkpoint, a
    dict of arrays, a 2-D array, a model object). Also named `inspect` (the CLI's command)."""
    arg = _model_arg(model, "model")
    return Checkpoint(_core.open_checkpoint(arg) if isinstance(arg, str) else arg).describe()


inspect = describe


_INT64 = (-(2**63), 2**63 - 1)
MAX_ALPHA_CI = 10000  # the engine's bound on alpha_ci (bootstrap draws per matrix; docs/metrics.md)
_INT32 = (-(2**31), 2**31 - 1)


def _checked_int(value: Any, arg: str, minimum: Optional[int] = None, maximum: int = 2**63 - 1) -> int:
    """An integer argument, refused by name instead of truncated or overflowing: a bool, a float
    (1.7 and 2.0 alike: say 2), a non-number (TypeError) or a value outside [minimum, maximum]
    (InputError, a ValueError, e.g. 2**70)."""
    import operator

    if isinstance(value, bool):
        raise TypeError(f"{arg}=: expected an integer, found {value!r}")
    try:
        n = operator.index(value)  # int, numpy integers; never a float
    except TypeError:
        raise TypeError(f"{arg}=: expected an integer, found {value!r} ({type(value).__name__})") from None
    low = _INT64[0] if minimum is None else minimum
    if n < low or n > maximum:
        bound = f">= {low}" if n < low else f"<= {maximum}"
        raise InputError(f"{arg}=: {n} is out of range (expected an integer {bound})")
    return n


def _run_args(threads, max_memory, store, device, progress, roles, layers, match, exclude, experts, component) -> "_core.RunArgs":
    """The shared run options (--threads, --max-memory, --store, --device, selection) for the engine;
    progress: None or the callable receiving the engine's (done, total, label) reports (_progress)."""
    r = _core.RunArgs()
    r.threads = _checked_int(threads, "threads", 0, _INT32[1])
    r.max_memory = "" if max_memory is None else str(max_memory)
    r.store = "" if store is None else os.fspath(store)
    r.device = device
    if progress is not None:  # the field defaults to None (nanobind refuses None for an object field)
        r.progress = progress
    _set_selection(r, roles, layers, match, exclude, experts, component)
    return r


def _set_selection(args, roles, layers, match, exclude, experts, component) -> None:
    """The selection flags (--roles, --layers, --match, --exclude, --experts, --component) on a bound
    argument struct."""
    args.roles = _roles_spec(roles)
    args.layers = _layers_spec(layers)
    args.match = match or ""
    args.exclude = exclude or ""
    args.experts = _experts_spec(experts)
    args.components = _names_spec(component, "component", "\"language,vision\" or a list of component names",
                                  "a component name")


def _experts_spec(experts) -> str:
    """--experts as text: "0-7,shared" as is, or an int, "shared", or an iterable of them."""
    if experts is None or isinstance(experts, str):
        return experts or ""
    items = [experts] if not hasattr(experts, "__iter__") else list(experts)
    out = []
    for x in items:
        if isinstance(x, str) and x == "shared":
            out.append(x)
            continue
        try:
            out.append(str(_checked_int(x, "experts", 0, _INT32[1])))
        except (TypeError, ValueError):
            raise TypeError(f"experts=: {x!r} is not an expert index or 'shared'") from None
    return ",".join(out)


def _names_spec(value, arg: str, expected: str, item: str = "a name") -> str:
    """A comma-separated list flag as text: as is, or an iterable of names (strings)."""
    if value is None or isinstance(value, str):
        return value or ""
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{arg}=: expected {expected}, not {type(value).__name__}") from None
    for r in items:
        if not isinstance(r, str):
            raise TypeError(f"{arg}=: {r!r} is not {item} (a string)")
    return ",".join(items)


def _roles_spec(roles) -> str:
    """--roles as text: "attn_q,mlp_down" as is, or an iterable of role names (strings)."""
    return _names_spec(roles, "roles", "\"attn_q,mlp_down\" or a list of role names", "a role name")


def _layers_spec(layers) -> str:
    """--layers as text: "0-3,7" as is, or an int or an iterable of ints (each a layer index >= 0;
    a float, bool or negative value is refused, naming it, never truncated)."""
    if layers is None:
        return ""
    if isinstance(layers, str):
        return layers
    if isinstance(layers, (bytes, bytearray)):
        raise TypeError(f"layers=: expected \"0-3,7\", an int or a list of ints, not bytes")
    try:
        items = [layers] if not hasattr(layers, "__iter__") else list(layers)
    except TypeError:
        raise TypeError(f"layers=: expected \"0-3,7\", an int or a list of ints, not {type(layers).__name__}") from None
    out = []
    for x in items:
        try:
            n = _checked_int(x, "layers", 0, _INT32[1])
        except (TypeError, ValueError):
            raise (TypeError if not isinstance(x, int) or isinstance(x, bool) else InputError)(
                f"layers=: {x!r} is not a layer index (expected integers >= 0)") from None
        out.append(str(n))
    return ",".join(out)


def _metrics_spec(metrics) -> str:
    """--metrics as text: a string as is, or a list of names and @metric functions."""
    if isinstance(metrics, str):
        return metrics
    try:
        items = list(metrics)
    except TypeError:
        raise TypeError(f"metrics=: expected \"default\", a field name or a list of names and @metric "
                        f"functions, not {type(metrics).__name__}") from None
    names = [getattr(m, "metric_name", m) for m in items]
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"metrics=: {n!r} is not a field name or an @diffract.metric function")
    return ",".join(names)


# The per-matrix fields whose mean over a model's whole matrices `Analysis.summary` reports (those
# WeightWatcher's get_summary averages: alpha, alpha_weighted, stable_rank, mp_softrank).
SUMMARY_MEANS = ("pl_alpha", "pl_alpha_weighted", "stable_rank", "mp_soft_rank")


def _columns_of(table) -> dict:
    """A result table (DataFrame or dict of lists) as a dict of lists."""
    if isinstance(table, dict):
        return table
    return {name: table[name].tolist() for name in table.columns}


def _is_missing(value) -> bool:
    """None, NaN or pandas' NA."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value
    return type(value).__name__ == "NAType"


def _finite_mean(values) -> float:
    xs = [float(v) for v in values if not _is_missing(v) and not isinstance(v, str)]
    xs = [x for x in xs if x == x and abs(x) != float("inf")]
    return sum(xs) / len(xs) if xs else float("nan")


@dataclass(repr=False)
class Analysis:
    """The result of analyze: per-matrix rows (metrics.csv), per-model aggregates (aggregates.csv),
    the field columns, and how many matrices were computed or reused from the store. `summary`: one
    row per model (WeightWatcher's get_summary)."""
    metrics: pd.DataFrame
    aggregates: pd.DataFrame
    fields: list
    computed: int
    reused: int

    @property
    def summary(self) -> pd.DataFrame:
        """One row per model and component (a multimodal model's language model and towers apart):
        `model`, `component`, `matrices` (the whole matrices analysed, head blocks left out),
        the aggregates (aggregates.csv's IN_MODEL fields), and the mean over the model's whole matrices
        (NaN values skipped) of each of pl_alpha, pl_alpha_weighted, stable_rank and mp_soft_rank that
        was computed (WeightWatcher's get_summary: alpha, alpha_weighted, stable_rank, mp_softrank). A
        DataFrame, or a dict of lists without pandas."""
        rows, agg = _columns_of(self.metrics), _columns_of(self.aggregates)
        n = len(rows.get("model", []))
        row_keys = list(zip(rows.get("model", []), rows.get("component", ["language"] * n)))
        agg_keys = list(zip(agg.get("model", []), agg.get("component", ["language"] * len(agg.get("model", [])))))
        keys = list(dict.fromkeys(agg_keys + row_keys))
        heads = rows.get("head", [None] * n)
        whole = [_is_missing(h) for h in heads]
        out: dict = {"model": [k[0] for k in keys], "component": [k[1] for k in keys], "matrices": []}
        for name in agg:
            if name not in ("model", "component"):
                out[name] = []
        means = [f for f in SUMMARY_MEANS if f in rows]
        for f in means:
            out[f] = []
        for key in keys:
            mine = [i for i, (rk, w) in enumerate(zip(row_keys, whole)) if rk == key and w]
            out["matrices"].append(len(mine))
            at = agg_keys.index(key) if key in agg_keys else None
            for name in agg:
                if name not in ("model", "component"):
                    out[name].append(agg[name][at] if at is not None else float("nan"))
            for f in means:
                out[f].append(_finite_mean(rows[f][i] for i in mine))
        return _table(out)

    _TABLES = "metrics, aggregates, summary, fields"

    def __repr__(self) -> str:
        """A few lines: what was read, the rows, computed/reused, warnings (the tables: res.metrics, ...)."""
        return _display.text("Analysis", _display.analysis_facts(self), self._TABLES)

    def _repr_html_(self) -> str:
        return _display.html_of("Analysis", _display.analysis_facts(self), self._TABLES)


@dataclass(repr=False)
class Comparison:
    """The result of compare: per-matrix rows (compare.csv), per-head rows (heads.csv, with `rank` 1 =
    the most important head of its model and `rewind_order` = heads.csv's rank, 0 = the first head to
    rewind), the skipped items (--allow-partial), and how many (model, matrix) pairs were computed or
    reused. `heads`, or any subset of its rows, is what edit.rewind(heads=...) takes. `experts`
    (experts.csv, a mixture of experts only: empty otherwise): per layer and expert, the heads' analysis
    with experts as the units, routed and shared ranked apart (`rank` 1 = the most important of its
    model and kind), and the router row's drift. `expert_overlap` (expert_overlap.csv, a mixture of
    experts with overlap_k > 0: empty otherwise): per model, layer, pair of routed experts and side
    (read: gate/up, write: down), the overlap of their top-k singular subspaces in the base and in the
    model, and the chance floor (docs/formats/moe.md)."""
    matrices: pd.DataFrame
    heads: pd.DataFrame
    skipped: pd.DataFrame
    computed: int
    reused: int
    experts: Any = None
    expert_overlap: Any = None

    _TABLES = "matrices, heads, experts, expert_overlap, skipped"

    def __repr__(self) -> str:
        """A few lines: models, base, reference, rows, computed/reused, skipped, warnings."""
        return _display.text("Comparison", _display.comparison_facts(self), self._TABLES)

    def _repr_html_(self) -> str:
        return _display.html_of("Comparison", _display.comparison_facts(self), self._TABLES, self.heads)


def _warn_nonfinite(lines) -> None:
    """One RuntimeWarning per tensor with NaN/Inf entries (the CLI's "diffract: warning:" lines); the
    rows of its matrices have nonfinite_count > 0 and NaN metrics."""
    for line in lines:
        warnings.warn(line, RuntimeWarning, stacklevel=4)  # past analyze and its _python_errors wrapper


@_python_errors
def analyze(models: Any = None, *, model: Any = None, metrics: Union[str, Sequence] = "default", heads: bool = True,
            allow_partial: bool = False, precision: str = "f64", svd_route: str = "auto", seed: int = 42, threads: int = 0,
            max_memory: Optional[Union[str, int]] = None, store: Optional[PathArg] = None, device: str = "cpu",
            roles: Roles = None, layers: Layers = None, match: Optional[str] = None, exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None,
            progress: bool = False, out: Optional[PathArg] = None, min_fit_size: int = 50, alpha_ci: int = 0,
            alpha_ci_seed: int = 0, null_draws: int = 1, p_value_draws: int = 100,
            convention: str = "diffract") -> Analysis:
    """`diffract analyze`: the metric catalog for every selected matrix and attention head.

    models: one model or a list — spec strings (PATH, org/name[@rev], NAME=PATH), Checkpoints, dicts
    of arrays / state_dicts, a 2-D numpy array or torch tensor (a one-matrix model, its tensor named
    "weight"), or model objects (transformers, PEFT, torch nn.Module: from_model); model= is the same
    argument by WeightWatcher's name (give one of the two). allow_partial=True skips matrices of a type
    or quantization scheme that is not decoded (counted in a warning) instead of raising. Options mirror
    the CLI (--metrics, --no-heads → heads=False, --allow-partial,
    --precision, --svd-route, --seed, --threads, --max-memory, --store, --device, --roles, --layers,
    --match, --exclude, --min-fit-size, --alpha-ci, --alpha-ci-seed, --null-draws, --p-value-draws,
    --convention); metrics may name
    @diffract.metric functions. Fit statuses (pl_status, ...) are names, as in metrics.csv. out: also
    write metrics.csv and aggregates.csv there (and weightwatcher.csv with convention="weightwatcher").
    progress=True: a tqdm bar (stderr lines without tqdm). Returns an Analysis (pandas DataFrames, or
    dicts of lists without pandas; `.summary`: one row per model). The GIL is released while computing;
    Ctrl-C raises KeyboardInterrupt."""
    _not_inside_a_metric("analyze")
    models = _model_list("analyze", models, model)
    _refresh_metrics()
    with _progress.display(progress) as sink:
        r = _core.analyze(_model_args(models), _metrics_spec(metrics), bool(heads), bool(allow_partial), precision,
                          svd_route, _checked_int(seed, "seed"), _checked_int(min_fit_size, "min_fit_size", 0, _INT32[1]),
                          _checked_int(alpha_ci, "alpha_ci", 0, MAX_ALPHA_CI),
                          _checked_int(alpha_ci_seed, "alpha_ci_seed", 0, 2**64 - 1),
                          _checked_int(null_draws, "null_draws", 1, _INT32[1]),
                          _checked_int(p_value_draws, "p_value_draws", 1, _INT32[1]), convention,
                          _run_args(threads, max_memory, store, device, sink, roles, layers, match, exclude, experts, component),
                          "" if out is None else os.fspath(out))
    _warn_nonfinite(r["warnings"])
    return Analysis(_table(r["rows"]), _table(r["aggregates"]), list(r["fields"]), r["computed"], r["reused"])


# compare's defaults, written once in the library (run::CompareOptionText) and read here.
_COMPARE = _core.CompareOptionText()


@_python_errors
def compare(models: Any = None, *, base: Any, model: Any = None, reference: Any = None,
            top_k: int = _COMPARE.top_k, scale_scope: str = _COMPARE.scale_scope, order: str = _COMPARE.order,
            seed: int = _COMPARE.seed, precision: str = _COMPARE.precision, svd_route: str = _COMPARE.svd_route,
            heads: bool = _COMPARE.heads, allow_partial: bool = _COMPARE.allow_partial,
            delta_only: bool = _COMPARE.delta_only, overlap_k: int = _COMPARE.overlap_k, threads: int = 0,
            max_memory: Optional[Union[str, int]] = None,
            store: Optional[PathArg] = None, device: str = "cpu", roles: Roles = None, layers: Layers = None,
            match: Optional[str] = None, exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None, progress: bool = False,
            out: Optional[PathArg] = None) -> Comparison:
    """`diffract compare MODEL... --base BASE`: every matrix and head block of each model (one or a
    list) against the base, and the per-head update norms, importance and ranking (with `reference`).

    Options mirror the CLI (--base, --reference, --top-k, --scale-scope, --order, --seed, --precision,
    --svd-route, --no-heads → heads=False, --allow-partial, --delta-only, --overlap-k and the run options). Models (and base,
    reference) are what analyze takes: specs, Checkpoints, state_dicts, 2-D arrays or model objects;
    model= is the first argument by WeightWatcher's name. out: also write compare.csv and heads.csv there.
    progress=True: a tqdm bar. Returns a Comparison of DataFrames (dicts of lists without pandas). In
    `heads`, rank 1 is the most important head of its model (the last to rewind under `order`) and
    rewind_order is heads.csv's `rank` (0 = the first head to rewind)."""
    _not_inside_a_metric("compare")
    models = _model_list("compare", models, model)
    with _progress.display(progress) as sink:
        o = _core.CompareOptionText()
        o.top_k = _checked_int(top_k, "top_k", 0, _INT32[1])
        o.scale_scope, o.order = scale_scope, order
        o.seed = _checked_int(seed, "seed", 0, 2**64 - 1)
        o.precision, o.svd_route = precision, svd_route
        o.heads, o.allow_partial, o.delta_only = bool(heads), bool(allow_partial), bool(delta_only)
        o.overlap_k = _checked_int(overlap_k, "overlap_k", _INT32[0], _INT32[1])  # < 0: the library says why
        r = _core.compare(_model_arg(base, "base"), _model_args(models),
                          None if reference is None else _model_arg(reference, "reference"), options=o,
                          run=_run_args(threads, max_memory, store, device, sink, roles, layers, match, exclude,
                                        experts, component),
                          out="" if out is None else os.fspath(out))
    _warn_nonfinite(r["warnings"])
    for line in r["findings"]:  # e.g. no head stands out: the ranking orders noise
        warnings.warn(line, UserWarning, stacklevel=3)
    return Comparison(_table(r["rows"]), _heads_table(r["heads"]), _table(r["skipped"]),
                      r["computed"], r["reused"], experts=_heads_table(r["experts"], group=("model", "expert_kind")),
                      expert_overlap=_table(r["expert_overlap"]))


@dataclass(repr=False)
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

    _TABLES = "checkpoints, metrics, aggregates, compare, heads, trends, alerts"

    def __repr__(self) -> str:
        """A few lines: checkpoints and steps, rows, alerts."""
        return _display.text("Watch", _display.watch_facts(self), self._TABLES)

    def _repr_html_(self) -> str:
        return _display.html_of("Watch", _display.watch_facts(self), self._TABLES, self.heads)


@_python_errors
def watch(run_dir: Union[str, os.PathLike], *, out: Union[str, os.PathLike], base: Optional[Union[str, os.PathLike]] = None,
          metrics: Union[str, Sequence] = "default", heads: bool = True, precision: str = "f64",
          svd_route: str = "auto", seed: int = 42, min_fit_size: int = 50, delta_only: bool = False,
          follow: bool = False, every: int = 1,
          until_step: Optional[int] = None, poll: float = 10, settle: float = 2, alpha_low: float = 2,
          alpha_high: float = 6, alpha_jump: float = 1.0, stable_rank_jump: float = 0.2, head_share: float = 0.5,
          threads: int = 0, max_memory: Optional[Union[str, int]] = None, store: Optional[PathArg] = None, device: str = "cpu",
          roles: Roles = None, layers: Layers = None, match: Optional[str] = None, exclude: Optional[str] = None, experts: Experts = None,
        component: Components = None,
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

    _not_inside_a_metric("watch")
    _refresh_metrics()
    t = _core.AlertThresholds()
    t.alpha_low, t.alpha_high, t.alpha_jump = float(alpha_low), float(alpha_high), float(alpha_jump)
    t.stable_rank_jump, t.head_share = float(stable_rank_jump), float(head_share)
    with _progress.display(progress) as sink:
        r = _core.watch(os.fspath(run_dir), os.fspath(out), "" if base is None else os.fspath(base),
                        _metrics_spec(metrics), bool(heads), precision, svd_route, _checked_int(seed, "seed"),
                        _checked_int(min_fit_size, "min_fit_size", 0, _INT32[1]), bool(delta_only), bool(follow),
                        _checked_int(every, "every", 1),
                        None if until_step is None else _checked_int(until_step, "until_step"), float(poll),
                        float(settle), t,
                        _run_args(threads, max_memory, store, device, sink, roles, layers, match, exclude, experts, component), notice)
    _warn_nonfinite(r["warnings"])
    tables = {k: _table(r[k]) for k in ("checkpoints", "metrics", "aggregates", "compare", "trends", "alerts")}
    tables["heads"] = _heads_table(r["heads"], group=("step", "model"))
    return Watch(*(tables[k] for k in ("checkpoints", "metrics", "aggregates", "compare", "heads", "trends",
                                       "alerts")))


@_python_errors
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
    if isinstance(domains, str):
        domains = [domains]

    def size(value, arg, least=1):
        return None if value is None else _checked_int(value, arg, least, _INT32[1])

    if isinstance(shard_mb, bool) or not isinstance(shard_mb, (int, float)) and not hasattr(shard_mb, "__float__"):
        raise TypeError(f"shard_mb=: expected a number of MB, found {shard_mb!r}")
    mb = float(shard_mb)
    if not (mb >= 0) or mb == float("inf"):
        raise InputError(f"shard_mb=: expected a size in MB >= 0 (0: one file per model), found {shard_mb!r}")
    _core.generate(out, preset, size(layers, "layers"), size(hidden, "hidden"), size(heads, "heads"),
                   size(kv_heads, "kv_heads", 0), size(intermediate, "intermediate"), size(vocab, "vocab"),
                   list(domains), reference, size(domain_heads, "domain_heads", 0),
                   size(generic_heads, "generic_heads", 0), dtype, mb,
                   _checked_int(seed, "seed", 0, 2**64 - 1), list(models or ()))
    return out


# The custom metrics registered from Python: name -> (function, needs, version= given or None, the
# version registered). Their default versions are computed again before each computation
# (_refresh_metrics), so a global or closed-over value changed after registration is a new version.
_METRICS: dict = {}


_IN_METRIC = threading.local()  # .name: the custom metric running on this thread


def _not_inside_a_metric(function: str) -> None:
    """A custom metric runs on the engine's worker threads inside a computation: one that starts
    another (analyze inside a metric) would nest thread pools without end. Refused by name."""
    name = getattr(_IN_METRIC, "name", None)
    if name is not None:
        raise InputError(f"metric '{name}': a custom metric cannot call diffract.{function} (it runs inside one)")


def _guarded(name: str, fn: Callable) -> Callable:
    """fn as the engine calls it: marks its thread as inside the metric `name` while it runs."""

    def call(*arrays):
        outer = getattr(_IN_METRIC, "name", None)
        _IN_METRIC.name = name
        try:
            return fn(*arrays)
        finally:
            _IN_METRIC.name = outer

    return call


def _register(name: str, needs: list, fn: Callable, version: Optional[str]) -> None:
    from ._metric_version import metric_version

    registered = version if version is not None else metric_version(fn)
    _core.register_metric(name, needs, registered, _guarded(name, fn))
    _METRICS[name] = (fn, needs, version, registered)


def _refresh_metrics() -> None:
    """Registers again each custom metric whose default version changed since it was registered (its
    code, defaults, closure or the globals it reads): its results are then computed anew, never served
    stale from the store."""
    from ._metric_version import metric_version

    registered = set(_core.registered_metrics())
    for name, (fn, needs, version, current) in list(_METRICS.items()):
        if name not in registered:
            _METRICS.pop(name)
            continue
        if version is None and metric_version(fn) != current:
            _register(name, needs, fn, None)


def metric(needs: Sequence[str] = ("weights_svals",), *, name: Optional[str] = None,
           version: Optional[str] = None) -> Callable:
    """Decorator: a custom per-matrix metric, computed by the engine for every matrix and head block
    in the task of its built-in fields (on the worker threads) and kept in the store like them.

    needs: the inputs, passed positionally in this order — "weights_svals" (singular values,
    ascending), "esd" (sigma^2 / max(rows, cols), ascending), "weights" (the matrix, float64). The
    function returns a float. name defaults to the function's name (a lambda needs name=); version
    (part of the store key) defaults to a hash of the function's code, defaults, closure and the
    globals it reads, taken again before each analyze/watch, so a changed function or value is
    recomputed, never served stale (a value with no stable description: recomputed in each session;
    give version= to keep such results). Ask for it with analyze(metrics=[..., fn]) or by name."""
    if callable(needs) and not isinstance(needs, str):  # @diffract.metric without parentheses
        raise TypeError("metric: use @diffract.metric() or @diffract.metric(needs=[...]) (with parentheses)")
    needs = [needs] if isinstance(needs, str) else list(needs)
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InputError(f"metric: name= is a non-empty field name, not {name!r}")
    if version is not None and not isinstance(version, str):
        raise TypeError(f"metric: version= is a string, not {type(version).__name__}")

    def register(fn: Callable) -> Callable:
        """Registers fn and tags it with metric_name."""
        if not callable(fn):
            raise TypeError(f"metric: decorates a function, not {type(fn).__name__}")
        metric_name = name if name is not None else fn.__name__
        if metric_name == "<lambda>":
            raise InputError("metric: a lambda has no name: give name=")
        _register(metric_name, needs, fn, version)
        fn.metric_name = metric_name
        return fn

    return register


def unregister_metric(name: Union[str, Callable]) -> bool:
    """Forgets a custom metric (by name or decorated function); returns whether it was registered."""
    metric_name = getattr(name, "metric_name", name)
    _METRICS.pop(metric_name, None)
    return _core.unregister_metric(metric_name)


def registered_metrics() -> list:
    """The names of the registered custom metrics."""
    return _core.registered_metrics()


@_python_errors
def catalog():
    """The metric catalog (`diffract metrics`): name, level, is_vector, formula, inputs, in_default."""
    return _table(_core.catalog())


@_python_errors
def resolve_metrics(spec: Union[str, Sequence]) -> list:
    """The field names a --metrics value selects ("default", "all", names, custom metrics)."""
    return _core.resolve_metrics(_metrics_spec(spec))


from . import edit  # noqa: E402  (edit uses the helpers above)
from . import sweep  # noqa: E402  (sweep too)

# Submodules imported on first use, so that `import diffract_spectral` stays fast: `diffract.eval` (the
# shipped evaluators) and `diffract.integrations`.
_LAZY_SUBMODULES = ("eval", "integrations")


def __getattr__(name: str) -> Any:
    """`diffract.eval` and `diffract.integrations`: imported on first access."""
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))
