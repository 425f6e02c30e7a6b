"""The default version of a custom metric (@diffract.metric): a hash of everything its result depends on
that Python can see, so that a changed function is never served stale from the store.

Hashed: the function's code (bytecode, names, constants, nested code objects by their own code — never
by their addresses), its default arguments, the values its closure holds and the globals its code reads
(numbers, strings, bytes, tuples, lists, dicts, sets, numpy arrays by their bytes, functions by this
same hash, modules and classes by name). A value with no stable description (an arbitrary object whose
repr shows an address) is hashed with a token drawn once per process: the metric is then recomputed in
each new session instead of being trusted — give version= to keep such results across sessions.
"""
from __future__ import annotations

import hashlib
import os
import types
from typing import Any, Callable

_SESSION_TOKEN = os.urandom(16)  # for values without a stable description (see the module docstring)
_MAX_DEPTH = 12


def _feed(h: "hashlib._Hash", *parts: Any) -> None:
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")


def _code(code: types.CodeType, h, depth: int, seen: set) -> None:
    _feed(h, "code", code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
    for const in code.co_consts:
        _value(const, h, depth + 1, seen)


def _global_names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _function(fn: types.FunctionType, h, depth: int, seen: set) -> None:
    if id(fn) in seen:  # recursion (a function reading itself or a cycle of functions)
        _feed(h, "function-seen", fn.__qualname__)
        return
    seen = seen | {id(fn)}
    _feed(h, "function", fn.__qualname__)
    _code(fn.__code__, h, depth, seen)
    _value(fn.__defaults__, h, depth + 1, seen)
    _value(fn.__kwdefaults__, h, depth + 1, seen)
    for cell in fn.__closure__ or ():
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell
            _feed(h, "empty-cell")
            continue
        _value(content, h, depth + 1, seen)
    g = fn.__globals__
    for name in sorted(_global_names(fn.__code__)):
        if name in g:
            _feed(h, "global", name)
            _value(g[name], h, depth + 1, seen)


def _value(value: Any, h, depth: int, seen: set) -> None:
    if depth > _MAX_DEPTH:
        _feed(h, "deep", _SESSION_TOKEN)
        return
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        _feed(h, type(value).__name__, value)
    elif isinstance(value, (tuple, list)):
        _feed(h, type(value).__name__, len(value))
        for v in value:
            _value(v, h, depth + 1, seen)
    elif isinstance(value, (set, frozenset)):
        _feed(h, type(value).__name__, sorted(repr(v) for v in value))
    elif isinstance(value, dict):
        _feed(h, "dict", len(value))
        for k in sorted(value, key=repr):
            _value(k, h, depth + 1, seen)
            _value(value[k], h, depth + 1, seen)
    elif isinstance(value, types.CodeType):
        _code(value, h, depth, seen)
    elif isinstance(value, types.FunctionType):
        _function(value, h, depth, seen)
    elif isinstance(value, types.ModuleType):
        _feed(h, "module", value.__name__)
    elif isinstance(value, type):
        _feed(h, "class", value.__module__, value.__qualname__)
    elif isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        _feed(h, "builtin", getattr(value, "__module__", None), value.__qualname__)
    elif type(value).__module__.startswith("pandas") and hasattr(value, "to_numpy"):
        import pandas as pd

        _feed(h, "pandas", type(value).__qualname__, getattr(value, "shape", None),
              list(map(str, getattr(value, "columns", []))))
        h.update(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
    elif type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "shape"):
        _value(value.detach().cpu().numpy(), h, depth, seen)
    elif type(value).__module__ == "numpy" and hasattr(value, "tobytes") and hasattr(value, "dtype"):
        import numpy as np

        a = np.ascontiguousarray(value)
        _feed(h, "ndarray", str(a.dtype), a.shape)
        h.update(a.tobytes())
    else:
        text = repr(value)
        if " at 0x" in text or type(value).__repr__ is object.__repr__:
            _feed(h, "opaque", type(value).__qualname__, _SESSION_TOKEN)
        else:
            _feed(h, "repr", type(value).__qualname__, text)


def metric_version(fn: Callable) -> str:
    """The default version of a custom metric: 16 hex digits of the hash described above."""
    h = hashlib.sha256()
    if isinstance(fn, types.FunctionType):
        _function(fn, h, 0, set())
    else:  # a callable object: its class's __call__ and its attributes
        _value(type(fn), h, 0, set())
        call = getattr(type(fn), "__call__", None)
        if isinstance(call, types.FunctionType):
            _function(call, h, 0, set())
        _value(getattr(fn, "__dict__", {}), h, 1, set())
    return h.hexdigest()[:16]
